package stack

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/rs/zerolog"
)

// The stack's temporary directories: the generated credentials and the
// built binaries. Each records its owner's pid, so a later stack removes
// those a killed stack (SIGKILL: no Stop) left behind, as pgcluster does for
// the private Postgres.
const (
	credentialsPrefix = "converge-stack-credentials-"
	binPrefix         = "converge-stack-bin-"
	ownerFile         = "owner.pid"
)

// ownedTempDir creates a private temporary directory that records this
// process as its owner.
func ownedTempDir(prefix string) (string, error) {
	dir, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", fmt.Errorf("create a temporary directory: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, ownerFile), []byte(strconv.Itoa(os.Getpid())), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("record the owner of %s: %w", dir, err)
	}
	return dir, nil
}

// sweepStaleTempDirs removes the stack directories whose owner is gone.
func sweepStaleTempDirs(log zerolog.Logger) {
	for _, prefix := range []string{credentialsPrefix, binPrefix} {
		dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), prefix+"*"))
		for _, d := range dirs {
			b, err := os.ReadFile(filepath.Join(d, ownerFile))
			if err != nil {
				continue // not ours, or its owner is still writing it
			}
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil || pid <= 0 || alive(pid) {
				continue
			}
			if err := os.RemoveAll(d); err == nil {
				log.Debug().Str("dir", d).Int("owner_pid", pid).Msg("removed a killed stack's temporary directory")
			}
		}
	}
}

func alive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
