// Locating a JSON pointer (RFC 6901) in JSON text, so a server error about
// "/spokes" can be shown at the line that holds spokes.

/** Decode one pointer token (~1 → /, ~0 → ~). */
function unescapeToken(t: string): string {
  return t.replace(/~1/g, '/').replace(/~0/g, '~');
}

export function pointerTokens(pointer: string): string[] | null {
  if (pointer === '') return [];
  if (!pointer.startsWith('/')) return null;
  return pointer.slice(1).split('/').map(unescapeToken);
}

/**
 * pointerLine returns the 1-based line where the value at pointer starts in
 * text (for an object member, the line of its key). When the pointer goes
 * deeper than the text (a missing member), it returns the line of the
 * deepest existing parent. null when text is not JSON or the pointer is
 * malformed.
 */
export function pointerLine(text: string, pointer: string): number | null {
  const want = pointerTokens(pointer);
  if (!want) return null;
  let i = 0;
  let line = 1;
  let best: number | null = null;
  const ws = () => {
    while (i < text.length) {
      const c = text[i]!;
      if (c === '\n') line++;
      else if (c !== ' ' && c !== '\t' && c !== '\r') break;
      i++;
    }
  };
  const fail = (): never => {
    throw new Error('bad json');
  };
  const str = (): string => {
    if (text[i] !== '"') fail();
    let j = i + 1;
    let out = '';
    while (j < text.length && text[j] !== '"') {
      if (text[j] === '\\') {
        out += JSON.parse(`"${text.slice(j, j + (text[j + 1] === 'u' ? 6 : 2))}"`);
        j += text[j + 1] === 'u' ? 6 : 2;
      } else {
        if (text[j] === '\n') fail();
        out += text[j];
        j++;
      }
    }
    if (j >= text.length) fail();
    i = j + 1;
    return out;
  };
  // value parses one value at depth d; onPath says whether it lies on the pointer's path.
  const value = (d: number, onPath: boolean, startLine: number): void => {
    ws();
    if (onPath) {
      best = startLine;
    }
    const c = text[i];
    if (c === '{') {
      i++;
      ws();
      if (text[i] === '}') {
        i++;
        return;
      }
      for (;;) {
        ws();
        const keyLine = line;
        const k = str();
        ws();
        if (text[i] !== ':') fail();
        i++;
        value(d + 1, onPath && d < want.length && want[d] === k, keyLine);
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === '}') {
          i++;
          return;
        }
        fail();
      }
    } else if (c === '[') {
      i++;
      ws();
      if (text[i] === ']') {
        i++;
        return;
      }
      for (let n = 0; ; n++) {
        ws();
        value(d + 1, onPath && d < want.length && want[d] === String(n), line);
        ws();
        if (text[i] === ',') {
          i++;
          continue;
        }
        if (text[i] === ']') {
          i++;
          return;
        }
        fail();
      }
    } else if (c === '"') {
      str();
    } else {
      const m = /^(-?\d+(\.\d+)?([eE][+-]?\d+)?|true|false|null)/.exec(text.slice(i, i + 64));
      if (!m) fail();
      i += m![0].length;
    }
  };
  try {
    ws();
    value(0, true, line);
    ws();
    if (i !== text.length) return null;
  } catch {
    return null;
  }
  return best;
}
