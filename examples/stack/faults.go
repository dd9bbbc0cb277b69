package stack

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"github.com/converge-run/converge/db/pgcluster"
)

// Signal sends sig to the member's process (not its group).
func (m *Member) Signal(sig syscall.Signal) error {
	if err := syscall.Kill(m.Pid(), sig); err != nil {
		return fmt.Errorf("signal %s: %w", m.Name, err)
	}
	return nil
}

// Live lists the members of role (all, control, broker or worker) still
// running and not draining, in start order.
func (s *Stack) Live(role string) []*Member {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*Member
	for _, m := range s.members {
		if m.Role == role && !m.draining && !m.gone {
			out = append(out, m)
		}
	}
	return out
}

// RestartPostgres stops the private Postgres and starts it again on the
// same data directory and port: a fast shutdown (every session ends, a
// checkpoint) or, immediate, a crash (SIGQUIT to the postmaster: no
// checkpoint, crash recovery on start, and UNLOGGED tables come back
// empty). The stack needs Options.DataDir (a temporary one is removed when
// the server stops).
func (s *Stack) RestartPostgres(ctx context.Context, immediate bool) error {
	if s.opts.DataDir == "" {
		return errors.New("restart postgres: the stack needs Options.DataDir (a temporary data directory does not survive a stop)")
	}
	if immediate {
		pid, err := s.PostgresPid()
		if err != nil {
			return err
		}
		if err := syscall.Kill(pid, syscall.SIGQUIT); err != nil {
			return fmt.Errorf("SIGQUIT postgres: %w", err)
		}
	}
	begin := time.Now()
	if err := s.pg.Stop(); err != nil {
		return err
	}
	stopped := time.Now()
	pg, err := pgcluster.Start(ctx, s.pgOpts)
	if err != nil {
		s.pg = nil
		return err
	}
	s.pg = pg
	s.log.Info().Bool("immediate", immediate).Dur("stop", stopped.Sub(begin)).Dur("start", time.Since(stopped)).
		Msg("postgres restarted")
	return nil
}
