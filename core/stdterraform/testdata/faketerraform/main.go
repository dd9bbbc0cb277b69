// Command faketerraform stands in for terraform in stdterraform's tests: it
// reads the generated main.tf.json, checks the module arguments against the
// module directory's variables.json, plans by comparing them with its state
// file, applies a saved plan, prints outputs and destroys (checking the
// arguments again, as terraform loads the configuration to destroy too),
// logging every command to $FAKE_TF_LOG. A module argument fail_times=N
// makes the first N plans fail with a transient error; hang_apply=true
// makes apply run until it is interrupted. With FAKE_TF_INIT_WINDOW set
// (a duration), init fails when another init runs on the same plugin
// cache during that window, as terraform's plugin cache is not safe for
// concurrent use.
package main

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"
)

type variable struct {
	Name     string `json:"name"`
	Required bool   `json:"required"`
}

func main() {
	if len(os.Args) < 2 {
		fail("usage: terraform COMMAND")
	}
	cmd := os.Args[1]
	logLine(cmd)
	if os.Getenv("AWS_SECRET_ACCESS_KEY") != "" {
		fail("Error: the worker's environment leaked into terraform's")
	}
	root := readRoot()
	mod := root.Module["this"]
	source, _ := mod["source"].(string)
	vars := readVariables(source)
	args := map[string]any{}
	for k, v := range mod {
		if k != "source" && k != "version" {
			args[k] = v
		}
	}
	switch cmd {
	case "init":
		if w := os.Getenv("FAKE_TF_INIT_WINDOW"); w != "" {
			initAlone(w)
		}
		must(os.MkdirAll(".terraform", 0o700))
	case "plan":
		plan(args, vars)
	case "apply":
		b, err := os.ReadFile(os.Args[len(os.Args)-1])
		must(err)
		if args["hang_apply"] == true {
			hangUntilInterrupted()
		}
		must(os.WriteFile("terraform.tfstate", b, 0o600))
	case "output":
		state := readState()
		out := map[string]any{}
		if state != nil {
			sum := sha256.Sum256(mustJSON(state))
			out["id"] = "fake-" + hex.EncodeToString(sum[:4])
			for k, v := range state {
				out["echo_"+k] = v
			}
		}
		fmt.Println(string(mustJSON(map[string]any{"this": map[string]any{"sensitive": true, "type": "object", "value": out}})))
	case "destroy":
		validate(args, vars) // terraform loads the configuration to destroy too
		must(os.RemoveAll("terraform.tfstate"))
	default:
		fail("Error: unknown command " + cmd)
	}
}

func plan(args map[string]any, vars []variable) {
	validate(args, vars)
	if n, ok := args["fail_times"].(float64); ok {
		b, _ := os.ReadFile(".fails")
		done, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		if done < int(n) {
			must(os.WriteFile(".fails", []byte(strconv.Itoa(done+1)), 0o600))
			fail("Error: error creating VPC: RequestLimitExceeded: rate exceeded")
		}
	}
	out := planOut()
	must(os.WriteFile(out, mustJSON(args), 0o600))
	if reflect.DeepEqual(readState(), args) {
		fmt.Println("No changes. Your infrastructure matches the configuration.")
		os.Exit(0)
	}
	fmt.Println("Plan: changes to apply.")
	os.Exit(2)
}

// validate checks the module arguments against its variables, as terraform
// does whenever it loads the configuration (plan, apply, destroy).
func validate(args map[string]any, vars []variable) {
	if _, err := os.Stat(".terraform"); err != nil {
		fail("Error: Module not installed: run terraform init")
	}
	declared := map[string]bool{}
	for _, v := range vars {
		declared[v.Name] = true
		if _, ok := args[v.Name]; v.Required && !ok {
			fail(fmt.Sprintf("Error: Missing required argument\n\nThe argument %q is required, but no definition was found.", v.Name))
		}
	}
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !declared[k] {
			// As terraform reports it in a JSON root module.
			fail(fmt.Sprintf("Error: Extraneous JSON object property\n\nNo argument or block type is named %q.", k))
		}
	}
}

// hangUntilInterrupted stands for an apply whose provider call outlasts
// the run: on SIGINT it stops as terraform does — the call in flight
// finishes (a while), the state is saved (the marker file
// stopped-gracefully) — and exits 1. SIGTERM kills it as it kills
// terraform's provider plugins.
func hangUntilInterrupted() {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt)
	<-ch
	fmt.Fprintln(os.Stderr, "Interrupt received. Gracefully shutting down...")
	time.Sleep(2500 * time.Millisecond) // the provider call in flight returns
	must(os.WriteFile("stopped-gracefully", nil, 0o600))
	fail("Error: execution halted")
}

func planOut() string {
	for _, a := range os.Args[2:] {
		if v, ok := strings.CutPrefix(a, "-out="); ok {
			return v
		}
	}
	fail("Error: plan without -out")
	return ""
}

type rootDoc struct {
	Module map[string]map[string]any `json:"module"`
}

func readRoot() rootDoc {
	b, err := os.ReadFile("main.tf.json")
	must(err)
	var r rootDoc
	must(json.Unmarshal(b, &r))
	return r
}

func readVariables(source string) []variable {
	b, err := os.ReadFile(filepath.Join(source, "variables.json"))
	if err != nil {
		fail(fmt.Sprintf("Error: Unreadable module directory\n\nUnable to evaluate directory symlink: %v", err))
	}
	var vs []variable
	must(json.Unmarshal(b, &vs))
	return vs
}

func readState() map[string]any {
	b, err := os.ReadFile("terraform.tfstate")
	if err != nil {
		return nil
	}
	var s map[string]any
	must(json.Unmarshal(b, &s))
	return s
}

func logLine(cmd string) {
	path := os.Getenv("FAKE_TF_LOG")
	if path == "" {
		return
	}
	f, err := os.OpenFile(path, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o600)
	must(err)
	wd, _ := os.Getwd()
	_, err = fmt.Fprintf(f, "%s %s\n", filepath.Base(wd), cmd)
	must(err)
	must(f.Close())
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	must(err)
	return b
}

func must(err error) {
	if err != nil {
		fail("Error: " + err.Error())
	}
}

func fail(msg string) {
	fmt.Fprintln(os.Stderr, msg)
	os.Exit(1)
}

// initAlone marks this init running in $TF_PLUGIN_CACHE_DIR for window and
// fails if another init is marked running there meanwhile.
func initAlone(window string) {
	d, err := time.ParseDuration(window)
	must(err)
	cache := os.Getenv("TF_PLUGIN_CACHE_DIR")
	mine := filepath.Join(cache, fmt.Sprintf("init-running-%d", os.Getpid()))
	must(os.WriteFile(mine, nil, 0o600))
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		running, err := filepath.Glob(filepath.Join(cache, "init-running-*"))
		must(err)
		if len(running) > 1 {
			_ = os.Remove(mine)
			fail("Error: another terraform init is installing providers into the plugin cache " + cache + " at the same time")
		}
	}
	must(os.Remove(mine))
}
