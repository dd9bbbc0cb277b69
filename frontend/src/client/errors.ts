// Errors the API returns, as the dashboard handles them.

/** One GraphQL error as the server's error presenter shapes it. */
export interface GraphQLErrorShape {
  message: string;
  path?: ReadonlyArray<string | number>;
  extensions?: {
    /** BAD_USER_INPUT, NOT_FOUND, CONFLICT, UNAUTHENTICATED, FORBIDDEN, INTERNAL, … */
    code?: string;
    /** The input argument at fault (BAD_USER_INPUT): "spec", "name", … */
    field?: string;
    /** A JSON pointer into that input ("/cidr"). */
    pointer?: string;
    /** The violated rule (schema keyword or check name). */
    rule?: string;
    requestId?: string;
    [key: string]: unknown;
  };
}

/** A failed request: GraphQL errors, an HTTP failure or a transport error. */
export class ApiError extends Error {
  readonly errors: readonly GraphQLErrorShape[];
  readonly status: number | undefined;

  constructor(errors: readonly GraphQLErrorShape[], status?: number) {
    super(errors.map((e) => e.message).join('; ') || `request failed${status ? ` (HTTP ${status})` : ''}`);
    this.name = 'ApiError';
    this.errors = errors;
    this.status = status;
  }

  /** The first error's extensions.code ("" when there is none). */
  get code(): string {
    return this.errors[0]?.extensions?.code ?? '';
  }
}

/** toApiError turns anything a request or subscription throws into an ApiError. */
export function toApiError(e: unknown): ApiError {
  if (e instanceof ApiError) return e;
  if (Array.isArray(e)) return new ApiError(e as GraphQLErrorShape[]);
  if (e instanceof Error) return new ApiError([{ message: e.message }]);
  if (e && typeof e === 'object' && 'code' in e && 'reason' in e) {
    // A websocket CloseEvent.
    const ce = e as { code: number; reason: string };
    return new ApiError([{ message: ce.reason || `connection closed (${ce.code})`, extensions: { code: closeCode(ce.code) } }]);
  }
  return new ApiError([{ message: String(e) }]);
}

function closeCode(code: number): string {
  if (code === 4401 || code === 4403) return 'UNAUTHENTICATED';
  return 'CONNECTION_CLOSED';
}

/** A field-level input error: which input, where in it, and what is wrong. */
export interface FieldError {
  field: string;
  pointer: string;
  message: string;
}

/**
 * fieldErrors picks the BAD_USER_INPUT errors that name an input field
 * (extensions.field, with extensions.pointer into it), so a form can show
 * each one at its field. Other errors stay general, and so does the error of
 * a field the form does not show (known: the fields it shows, by name or by
 * test), so no error goes unseen.
 */
export function fieldErrors(err: ApiError | null | undefined, known?: readonly string[] | ((f: FieldError) => boolean)): { fields: FieldError[]; general: string[] } {
  const shows = typeof known === 'function' ? known : known ? (f: FieldError) => known.includes(f.field) : () => true;
  const fields: FieldError[] = [];
  const general: string[] = [];
  for (const e of err?.errors ?? []) {
    const x = e.extensions;
    const f = x?.code === 'BAD_USER_INPUT' && typeof x.field === 'string' && x.field !== '' ? { field: x.field, pointer: typeof x.pointer === 'string' ? x.pointer : '', message: e.message } : null;
    if (f && shows(f)) fields.push(f);
    else general.push(x?.code ? `${e.message} (${x.code})` : e.message);
  }
  return { fields, general };
}
