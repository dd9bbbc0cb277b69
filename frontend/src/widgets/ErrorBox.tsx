// Errors as the API reported them.
import type { ApiError } from '../client/errors';

export function ErrorBox({ error, title }: { error: ApiError | string | null | undefined; title?: string }) {
  if (!error) return null;
  const lines = typeof error === 'string' ? [error] : error.errors.length ? error.errors.map((e) => (e.extensions?.code ? `${e.message} (${e.extensions.code})` : e.message)) : [error.message];
  return (
    <div className="error-box" role="alert">
      {title ? <strong>{title}: </strong> : null}
      {lines.length === 1 ? lines[0] : (
        <ul>
          {lines.map((l, i) => (
            <li key={i}>{l}</li>
          ))}
        </ul>
      )}
    </div>
  );
}
