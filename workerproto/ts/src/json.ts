// JSON documents on the wire: UTF-8 JSON bytes, empty for none.

const decoder = new TextDecoder("utf-8", { fatal: true });
const encoder = new TextEncoder();

/** parseJSON reads a JSON document off the wire (undefined when empty). */
export function parseJSON(b: Uint8Array, what: string): unknown {
  if (b.length === 0) {
    return undefined;
  }
  try {
    return JSON.parse(decoder.decode(b));
  } catch (err) {
    throw new Error(`${what} is not valid JSON: ${err instanceof Error ? err.message : String(err)}`);
  }
}

/** toJSON serialises a value for the wire (empty when undefined). */
export function toJSON(v: unknown, what: string): Uint8Array {
  if (v === undefined) {
    return new Uint8Array();
  }
  const s = JSON.stringify(v);
  if (s === undefined) {
    throw new Error(`${what} cannot be serialised as JSON`);
  }
  return encoder.encode(s);
}
