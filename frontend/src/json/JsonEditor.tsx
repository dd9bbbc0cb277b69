// A JSON text field that shows the server's field errors where they point:
// the line holding the JSON pointer is marked in the gutter, and the
// message names the pointer.
import { useId, useMemo, useRef } from 'react';
import { pointerLine } from './pointer';

export interface PointerError {
  pointer: string;
  message: string;
}

/** parseJSON reads editor text; blank is allowed when optional. */
export function parseJSON(text: string, optional = false): { ok: true; value: unknown } | { ok: false; error: string } {
  if (optional && text.trim() === '') return { ok: true, value: null };
  try {
    return { ok: true, value: JSON.parse(text) };
  } catch (e) {
    return { ok: false, error: `not valid JSON: ${(e as Error).message}` };
  }
}

export function JsonEditor({ label, value, onChange, errors = [], rows = 12, readOnly, optional, name }: { label: string; value: string; onChange?: (v: string) => void; errors?: readonly PointerError[]; rows?: number; readOnly?: boolean; optional?: boolean; name?: string }) {
  const id = useId();
  const gutter = useRef<HTMLPreElement>(null);
  const syntax = useMemo(() => parseJSON(value, optional), [value, optional]);
  const marks = useMemo(() => {
    const m = new Map<number, string[]>();
    for (const e of errors) {
      const line = pointerLine(value, e.pointer);
      if (line != null) m.set(line, [...(m.get(line) ?? []), e.message]);
    }
    return m;
  }, [errors, value]);
  const lineCount = Math.max(rows, value.split('\n').length);
  const invalid = errors.length > 0 || !syntax.ok;
  return (
    <div className="field json-field">
      <label htmlFor={id}>{label}</label>
      <div className={`json-editor${invalid ? ' invalid' : ''}`}>
        <pre className="json-gutter" aria-hidden="true" ref={gutter}>
          {Array.from({ length: lineCount }, (_, i) => (
            <span key={i} className={marks.has(i + 1) ? 'err' : undefined} title={marks.get(i + 1)?.join('\n')}>
              {i + 1}
              {'\n'}
            </span>
          ))}
        </pre>
        <textarea
          id={id}
          name={name}
          value={value}
          rows={rows}
          spellCheck={false}
          readOnly={readOnly}
          aria-invalid={invalid || undefined}
          aria-describedby={invalid ? `${id}-err` : undefined}
          onChange={(e) => onChange?.(e.target.value)}
          onScroll={(e) => {
            if (gutter.current) gutter.current.scrollTop = e.currentTarget.scrollTop;
          }}
        />
      </div>
      {invalid ? (
        <ul className="field-errors" id={`${id}-err`} role="alert">
          {!syntax.ok ? <li>{syntax.error}</li> : null}
          {errors.map((e, i) => {
            const line = pointerLine(value, e.pointer);
            return (
              <li key={i} data-pointer={e.pointer}>
                <code>{e.pointer || '/'}</code>
                {line != null ? <span className="muted"> (line {line})</span> : null}: {e.message}
              </li>
            );
          })}
        </ul>
      ) : null}
    </div>
  );
}

/** JsonView shows a JSON value, formatted. */
export function JsonView({ value, label }: { value: unknown; label: string }) {
  if (value === null || value === undefined) return <p className="muted">none</p>;
  return (
    <pre className="json-view" aria-label={label} tabIndex={0}>
      {JSON.stringify(value, null, 2)}
    </pre>
  );
}
