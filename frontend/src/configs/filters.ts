// The provider configs page's state, in the URL: filters (kind, name,
// default), the page's cursor stack and the selected config.
import type { ProviderConfigsQueryVariables } from '../gql/graphql';

export interface ConfigListState {
  kind: string;
  name: string;
  /** '' = any, 'yes' = defaults only, 'no' = overrides only. */
  isDefault: '' | 'yes' | 'no';
  cursors: string[];
  /** The selected config's kind/name, or "new" for the create form. */
  sel: { kind: string; name: string } | 'new' | null;
}

export const PAGE_SIZE = 50;

export function parseConfigState(q: URLSearchParams): ConfigListState {
  const d = q.get('default');
  const selName = q.get('sel');
  const kind = q.get('kind') ?? '';
  return {
    kind,
    name: q.get('name') ?? '',
    isDefault: d === 'yes' || d === 'no' ? d : '',
    cursors: (q.get('cursors') ?? '').split('.').filter((c) => /^[A-Za-z0-9_-]+$/.test(c)),
    sel: q.get('new') === '1' ? 'new' : selName ? { kind: q.get('selKind') ?? kind, name: selName } : null,
  };
}

export function configSearch(s: ConfigListState): URLSearchParams {
  const q = new URLSearchParams();
  if (s.kind) q.set('kind', s.kind);
  if (s.name) q.set('name', s.name);
  if (s.isDefault) q.set('default', s.isDefault);
  if (s.cursors.length) q.set('cursors', s.cursors.join('.'));
  if (s.sel === 'new') q.set('new', '1');
  else if (s.sel) {
    q.set('sel', s.sel.name);
    if (s.sel.kind !== s.kind) q.set('selKind', s.sel.kind);
  }
  return q;
}

export function configVariables(s: ConfigListState): ProviderConfigsQueryVariables {
  return {
    kind: s.kind || null,
    name: s.name || null,
    isDefault: s.isDefault === '' ? null : s.isDefault === 'yes',
    first: PAGE_SIZE,
    after: s.cursors.at(-1) ?? null,
  };
}
