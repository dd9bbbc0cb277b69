package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"

	"github.com/rs/zerolog"

	"github.com/converge-run/converge/examples/stack"
)

// clusterHelp is printed after the member list of a local cluster.
const clusterHelp = `commands (type them here): list | drain NAME | kill NAME | add control|broker|worker
  drain: SIGTERM, as a rolling update does (a broker drains for SHUTDOWN_DRAIN); kill: SIGKILL, a crash.
  Or through the API: the Drain and Kill buttons on the dashboard's Cluster page, or
  conctl cluster drain|kill MEMBER_ID (conctl get members lists the ids). A member that exits is
  not restarted: add starts a new one. Watch the shard ranges re-tile on the Cluster page.`

// topologyFlags defines --controls, --brokers and --workers (all 0: the
// single-process stack).
func topologyFlags() *stack.Topology {
	var top stack.Topology
	flag.IntVar(&top.Controls, "controls", 0, "a local cluster: this many ROLE=control processes (ROLE=all with --brokers 0; default 1)")
	flag.IntVar(&top.Brokers, "brokers", 0, "a local cluster: this many ROLE=broker processes")
	flag.IntVar(&top.Workers, "workers", 0, "a local cluster: this many workers, dialing the brokers through a round-robin balancer (default 1)")
	return &top
}

// printMembers prints one line per member: "member: NAME role=ROLE pid=PID [url=URL]".
func printMembers(st *stack.Stack) {
	for _, m := range st.Members() {
		state := ""
		if m.Exited() {
			state = " exited=" + strings.TrimPrefix(exitNote(m.ExitError()), "status=")
		}
		if m.URL != "" {
			fmt.Printf("member: %s role=%s pid=%d url=%s%s\n", m.Name, m.Role, m.Pid(), m.URL, state)
		} else {
			fmt.Printf("member: %s role=%s pid=%d%s\n", m.Name, m.Role, m.Pid(), state)
		}
	}
}

// watchCluster runs the local cluster until ctx ends: a member that exits
// on its own (killed from another terminal) is logged and left out, and the
// commands read from in drain, kill and add members.
func watchCluster(ctx context.Context, st *stack.Stack, in io.Reader, log zerolog.Logger) error {
	fmt.Println(clusterHelp)
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			log.Info().Msg("stopping: workers, then brokers and controls, then postgres")
			return nil
		case <-tick.C:
			for _, m := range st.Reap() {
				log.Warn().Str("member", m.Name).Str("role", m.Role).AnErr("exit", m.ExitError()).
					Msg("member exited; the others re-tile its shards (not restarted: add starts a new one)")
				fmt.Printf("exited: %s %s\n", m.Name, exitNote(m.ExitError()))
			}
		case line := <-lines:
			command(ctx, st, line)
		}
	}
}

// command runs one typed command and prints its outcome on one line.
func command(ctx context.Context, st *stack.Stack, line string) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return
	}
	switch {
	case f[0] == "list" && len(f) == 1:
		printMembers(st)
	case f[0] == "drain" && len(f) == 2:
		if err := st.Drain(f[1], 90*time.Second); err != nil {
			fmt.Printf("drain %s: %v\n", f[1], err)
			return
		}
		fmt.Printf("drained: %s\n", f[1])
	case f[0] == "kill" && len(f) == 2:
		if err := st.Kill(f[1]); err != nil {
			fmt.Printf("kill %s: %v\n", f[1], err)
			return
		}
		fmt.Printf("killed: %s\n", f[1])
	case f[0] == "add" && len(f) == 2:
		m, err := st.Add(ctx, f[1])
		if err != nil {
			fmt.Printf("add %s: %v\n", f[1], err)
			return
		}
		fmt.Printf("added: %s pid=%d\n", m.Name, m.Pid())
	default:
		fmt.Printf("unknown command %q\n%s\n", line, clusterHelp)
	}
}

// exitNote says how a member ended: status 0 is a drain (an API drain or a
// SIGTERM), 137 a kill (the API's, or a SIGKILL).
func exitNote(err error) string {
	var ee *exec.ExitError
	switch {
	case err == nil:
		return "status=0 (drained)"
	case errors.As(err, &ee) && ee.ExitCode() == 137:
		return "status=137 (killed)"
	default:
		return "status=" + strings.ReplaceAll(err.Error(), " ", "_")
	}
}
