import { describe, expect, it } from 'vitest';
import { configSearch, configVariables, parseConfigState } from './filters';

describe('provider config list state', () => {
  it('round-trips through the URL', () => {
    const s = { kind: 'vpc', name: 'prod', isDefault: 'no' as const, cursors: ['c1'], sel: { kind: 'vpc', name: 'prod' } };
    expect(parseConfigState(configSearch(s))).toEqual(s);
    const other = { ...s, sel: { kind: 'tgw', name: 'x' } };
    expect(parseConfigState(configSearch(other))).toEqual(other);
    expect(parseConfigState(configSearch({ ...s, sel: 'new' }))).toEqual({ ...s, sel: 'new' });
  });
  it('maps the default filter to the server argument', () => {
    const base = { kind: '', name: '', cursors: [], sel: null };
    expect(configVariables({ ...base, isDefault: '' }).isDefault).toBeNull();
    expect(configVariables({ ...base, isDefault: 'yes' }).isDefault).toBe(true);
    expect(configVariables({ ...base, isDefault: 'no', cursors: ['a', 'b'] })).toMatchObject({ isDefault: false, after: 'b', kind: null });
  });
});
