package maintenance_test

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/converge-run/converge/core/store/maintenance"
)

// notify_gated (00001) is the wake every pass here fires: under a storm of
// callers it must emit at most about one pg_notify per 50 ms window.
func TestNotifyGated_CoalescesAStormToOnePerWindow(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	listener, err := f.db.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, `LISTEN storm`)
	require.NoError(t, err)

	const callers = 500
	var wg sync.WaitGroup
	var mu sync.Mutex
	fired := 0
	start := time.Now()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var ok bool
			if err := f.db.QueryRow(ctx, `SELECT notify_gated('storm')`).Scan(&ok); err != nil {
				t.Error(err)
				return
			}
			if ok {
				mu.Lock()
				fired++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)

	received := 0
	for {
		wctx, cancel := contextWithTimeout(300 * time.Millisecond)
		_, err := listener.Conn().WaitForNotification(wctx)
		cancel()
		if err != nil {
			break
		}
		received++
	}
	windows := int(elapsed/(50*time.Millisecond)) + 1
	t.Logf("%d callers in %v: %d notifies received, %d winners, %d windows", callers, elapsed, received, fired, windows)
	require.GreaterOrEqual(t, received, 1, "a wake is never lost entirely")
	require.Equal(t, fired, received, "only the window's winner notifies")
	require.LessOrEqual(t, received, windows, "at most one notify per 50 ms window")
}

// NotifyWorkReady is the reaper's post-commit wake: it notifies even while
// notify_gated's window for work_ready is shut.
func TestNotifyWorkReady_NotifiesOutsideTheGate(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	listener, err := f.db.Acquire(ctx)
	require.NoError(t, err)
	defer listener.Release()
	_, err = listener.Exec(ctx, `LISTEN work_ready`)
	require.NoError(t, err)
	_, err = f.db.Exec(ctx, `INSERT INTO wake_state (channel, last_notified_at) VALUES ('work_ready', now() + interval '1 day')
	                         ON CONFLICT (channel) DO UPDATE SET last_notified_at = EXCLUDED.last_notified_at`)
	require.NoError(t, err)

	require.NoError(t, maintenance.New(f.db).NotifyWorkReady(ctx))
	wctx, cancel := contextWithTimeout(5 * time.Second)
	defer cancel()
	n, err := listener.Conn().WaitForNotification(wctx)
	require.NoError(t, err)
	require.Equal(t, "work_ready", n.Channel)
}
