// Who the dashboard talks to the API as: the bearer token (kept in local
// storage, shared with the GraphiQL page) and the role the server reports.
import { createContext, useContext, useState, type ReactNode } from 'react';
import { storeToken, storedToken } from '../client/client';
import { useClient, useQuery } from '../client/hooks';
import { ViewerDocument, type ApiRole } from '../gql/graphql';
import { Dialog } from '../widgets/Dialog';

interface Session {
  role: ApiRole | null;
  authRequired: boolean;
  version: string;
  unauthenticated: boolean;
  /** Mutations are allowed (admin, or an open API). */
  canMutate: boolean;
  openToken: () => void;
}

const SessionContext = createContext<Session>({ role: null, authRequired: false, version: '', unauthenticated: false, canMutate: true, openToken: () => {} });

export function useSession(): Session {
  return useContext(SessionContext);
}

export function SessionProvider({ children }: { children: ReactNode }) {
  const client = useClient();
  const q = useQuery(ViewerDocument, {});
  const [tokenOpen, setTokenOpen] = useState(false);
  const unauthenticated = q.error?.code === 'UNAUTHENTICATED' || q.error?.status === 401;
  const role = q.data?.viewer.role ?? null;
  const s: Session = {
    role,
    authRequired: q.data?.viewer.authRequired ?? unauthenticated,
    version: q.data?.version ?? '',
    unauthenticated,
    canMutate: role === 'ADMIN',
    openToken: () => setTokenOpen(true),
  };
  return (
    <SessionContext.Provider value={s}>
      {children}
      {tokenOpen || unauthenticated ? (
        <TokenDialog
          required={unauthenticated}
          refused={unauthenticated && storedToken() ? (q.error?.message ?? '') : null}
          onClose={() => setTokenOpen(false)}
          onSave={(t) => {
            storeToken(t);
            setTokenOpen(false);
            client.reconnect();
          }}
        />
      ) : null}
    </SessionContext.Provider>
  );
}

/**
 * TokenDialog asks for the bearer token. refused: the API refused the token
 * the requests carried, with its reason (null: none was refused).
 */
function TokenDialog({ required, refused, onClose, onSave }: { required: boolean; refused: string | null; onClose: () => void; onSave: (t: string | null) => void }) {
  const [value, setValue] = useState(storedToken() ?? '');
  const [invalid, setInvalid] = useState<string | null>(null);
  return (
    <Dialog
      title="API token"
      onClose={onClose}
      footer={
        <>
          <button type="button" onClick={() => onSave(null)}>
            Forget token
          </button>
          <button type="submit" form="token-form" className="primary">
            Use token
          </button>
        </>
      }
    >
      <form
        id="token-form"
        onSubmit={(e) => {
          e.preventDefault();
          const t = value.trim();
          const bad = tokenProblem(t);
          setInvalid(bad);
          if (!bad) onSave(t || null);
        }}
      >
        {refused != null ? (
          <p role="alert">
            The API refused the stored token{refused ? ` (${refused})` : ''}. Enter another, or forget it.
          </p>
        ) : required ? (
          <p role="alert">This API requires a bearer token (API_TOKENS_FILE).</p>
        ) : (
          <p>Requests carry this bearer token; it is kept in this browser only.</p>
        )}
        <div className="field">
          <label htmlFor="token-input">Bearer token</label>
          <input id="token-input" type="password" autoComplete="off" value={value} aria-invalid={invalid ? true : undefined} aria-describedby={invalid ? 'token-input-err' : undefined} onChange={(e) => setValue(e.target.value)} />
          {invalid ? (
            <span className="field-error" id="token-input-err" role="alert">
              {invalid}
            </span>
          ) : null}
        </div>
      </form>
    </Dialog>
  );
}

/**
 * tokenProblem says why a token cannot be sent (null: it can). A request
 * header carries printable ASCII only: with another character (a zero-width
 * space pasted with the token, say) every request would fail in the browser
 * before it left, reported as the API being unreachable.
 */
export function tokenProblem(t: string): string | null {
  let i = 0;
  for (const ch of t) {
    i++;
    const c = ch.codePointAt(0)!;
    if (c < 0x21 || c > 0x7e) {
      const u = `U+${c.toString(16).toUpperCase().padStart(4, '0')}`;
      return `The token holds ${u} at ${i}, which a request header cannot carry: a token is printable ASCII, without spaces.`;
    }
  }
  return null;
}
