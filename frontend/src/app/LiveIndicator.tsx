// Whether the dashboard is live: the subscription websocket's state.
import { useClient, useConnection } from '../client/hooks';

const TEXT = { connecting: 'Connecting…', live: 'Live', reconnecting: 'Reconnecting…', failed: 'Disconnected' } as const;

export function LiveIndicator() {
  const conn = useConnection();
  const client = useClient();
  return (
    <div className={`live live-${conn.state}`} role="status" aria-live="polite" data-testid="live-indicator" data-state={conn.state}>
      <span className="live-dot" aria-hidden="true" />
      {TEXT[conn.state]}
      {conn.state === 'failed' ? (
        <>
          {conn.error ? <span className="muted"> ({conn.error.message})</span> : null}
          <button type="button" className="link" onClick={() => client.reconnect()}>
            Retry
          </button>
        </>
      ) : null}
    </div>
  );
}
