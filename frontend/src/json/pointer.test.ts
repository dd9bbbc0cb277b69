import { describe, expect, it } from 'vitest';
import { pointerLine, pointerTokens } from './pointer';

const doc = `{
  "spokes": 3,
  "net": {
    "cidr": "10.0.0.0/16",
    "a/b": [1,
      {"x~y": true}
    ]
  }
}`;

describe('pointerLine', () => {
  it.each([
    { reason: 'the root', pointer: '', want: 1 },
    { reason: 'a top-level member', pointer: '/spokes', want: 2 },
    { reason: 'a nested member', pointer: '/net/cidr', want: 4 },
    { reason: 'an escaped slash', pointer: '/net/a~1b', want: 5 },
    { reason: 'an array element', pointer: '/net/a~1b/1', want: 6 },
    { reason: 'an escaped tilde inside an array element', pointer: '/net/a~1b/1/x~0y', want: 6 },
    { reason: 'a missing member points at its parent', pointer: '/net/missing', want: 3 },
    { reason: 'a malformed pointer', pointer: 'spokes', want: null },
  ])('$reason', ({ pointer, want }) => {
    expect(pointerLine(doc, pointer)).toBe(want);
  });

  it('returns null for text that is not JSON', () => {
    expect(pointerLine('{"a": }', '/a')).toBeNull();
    expect(pointerLine('{"a": 1} x', '/a')).toBeNull();
  });

  it('decodes tokens', () => {
    expect(pointerTokens('/a~1b/c~0d')).toEqual(['a/b', 'c~d']);
  });
});
