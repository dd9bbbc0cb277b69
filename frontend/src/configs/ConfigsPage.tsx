// Provider configs: the list (filters by kind, name and default; keyset
// pages), and create / edit / delete with the kind's config_schema errors
// shown at the field.
import { useEffect, useMemo, useState } from 'react';
import { Link, navigate, useLocation, withQuery } from '../app/router';
import { useSession } from '../app/session';
import { fieldErrors } from '../client/errors';
import { useMutation, useQuery, useRefetchOnPush } from '../client/hooks';
import { ApplyProviderConfigDocument, ConfigKindsDocument, DeleteProviderConfigDocument, ProviderConfigsDocument, ProviderConfigsLiveDocument, type JSONValue, type ProviderConfigRowFragment } from '../gql/graphql';
import { JsonEditor, JsonView, parseJSON } from '../json/JsonEditor';
import { emptyList, listSearch } from '../resources/filters';
import { formatTime, prettyJSON } from '../resources/mappers';
import { ConfirmDialog } from '../widgets/Dialog';
import { ErrorBox } from '../widgets/ErrorBox';
import { Pager } from '../widgets/Pager';
import { configSearch, configVariables, parseConfigState, type ConfigListState } from './filters';

const href = (s: ConfigListState) => withQuery('/configs', configSearch(s));

export function ConfigsPage() {
  const { search } = useLocation();
  const state = useMemo(() => parseConfigState(search), [search.toString()]);
  const vars = configVariables(state);
  const list = useQuery(ProviderConfigsDocument, vars);
  // Live across clients: every change of the kind's configs re-reads this view.
  useRefetchOnPush(ProviderConfigsLiveDocument, { kind: vars.kind ?? null }, list.refetch);
  const kinds = useQuery(ConfigKindsDocument, {});
  const { canMutate } = useSession();
  const [name, setName] = useState(state.name);
  useEffect(() => setName(state.name), [state.name]);
  const kindNames = [...new Set((kinds.data?.kinds ?? []).map((k) => k.name))];
  const items = list.data?.providerConfigs.items ?? [];
  const selected = state.sel && state.sel !== 'new' ? items.find((c) => c.kind === (state.sel as { kind: string }).kind && c.name === (state.sel as { name: string }).name) : undefined;
  const go = (s: Partial<ConfigListState>) => navigate(href({ ...state, ...s }));
  return (
    <section className={`page configs-page${state.sel ? ' with-detail' : ''}`}>
      <div className="list-pane">
        <h1>Provider configs</h1>
        <form
          className="filters"
          aria-label="Provider config filters"
          onSubmit={(e) => {
            e.preventDefault();
            go({ name: name.trim(), cursors: [] });
          }}
        >
          <div className="field">
            <label htmlFor="c-kind">Kind</label>
            <select id="c-kind" value={state.kind} onChange={(e) => go({ kind: e.target.value, cursors: [] })}>
              <option value="">All kinds</option>
              {kindNames.map((k) => (
                <option key={k}>{k}</option>
              ))}
            </select>
          </div>
          <div className="field">
            <label htmlFor="c-name">Name</label>
            <input id="c-name" value={name} onChange={(e) => setName(e.target.value)} />
          </div>
          <div className="field">
            <label htmlFor="c-default">Default</label>
            <select id="c-default" value={state.isDefault} onChange={(e) => go({ isDefault: e.target.value as ConfigListState['isDefault'], cursors: [] })}>
              <option value="">Any</option>
              <option value="yes">Defaults</option>
              <option value="no">Overrides</option>
            </select>
          </div>
          <div className="filter-actions">
            <button type="submit">Apply</button>
            <button type="button" className="primary" onClick={() => go({ sel: 'new' })} disabled={!canMutate}>
              New config
            </button>
          </div>
        </form>
        <ErrorBox error={list.error} />
        <Pager label="Config pages" count={items.length} noun="config" page={state.cursors.length + 1} hasPrev={state.cursors.length > 0} hasNext={!!list.data?.providerConfigs.nextCursor} onPrev={() => go({ cursors: state.cursors.slice(0, -1) })} onNext={() => go({ cursors: [...state.cursors, list.data!.providerConfigs.nextCursor!] })} />
        {list.data && items.length === 0 ? <p className="empty">No provider configs match.</p> : null}
        {items.length ? (
          <div className="table-wrap">
            <table className="grid" data-testid="configs">
              <thead>
                <tr>
                  <th scope="col">Name</th>
                  <th scope="col">Kind</th>
                  <th scope="col">Default</th>
                  <th scope="col">Owner</th>
                  <th scope="col">Updated</th>
                </tr>
              </thead>
              <tbody>
                {items.map((c) => (
                  <tr key={c.id} aria-selected={c === selected}>
                    <th scope="row">
                      <Link to={href({ ...state, sel: { kind: c.kind, name: c.name } })}>{c.name}</Link>
                    </th>
                    <td>{c.kind}</td>
                    <td>{c.isDefault ? 'default' : 'override'}</td>
                    <td>{c.owner ? <Link to={`/resources?${listSearch({ ...emptyList, sel: { kind: c.owner.kind, name: c.owner.name } }).toString()}`}>{`${c.owner.kind}/${c.owner.name}`}</Link> : <span className="muted">hand-authored</span>}</td>
                    <td>{formatTime(c.updatedAt)}</td>
                  </tr>
                ))}
              </tbody>
            </table>
          </div>
        ) : null}
      </div>
      {state.sel ? (
        <aside className="detail" aria-label="Provider config" data-testid="config-detail">
          <header className="detail-head">
            <h2>{state.sel === 'new' ? 'New provider config' : `${state.sel.kind}/${state.sel.name}`}</h2>
            <button type="button" className="close" aria-label="Close" onClick={() => go({ sel: null })}>
              ×
            </button>
          </header>
          {state.sel !== 'new' && list.data && !selected ? <p className="muted">Not on this page of the list: clear the filters or page to it.</p> : null}
          {state.sel === 'new' || selected ? (
            <ConfigForm
              key={selected?.id ?? 'new'}
              config={selected ?? null}
              kinds={kinds.data?.kinds ?? []}
              defaultKind={state.kind}
              onSaved={(c) => {
                list.refetch();
                go({ sel: { kind: c.kind, name: c.name } });
              }}
              onDeleted={() => {
                list.refetch();
                go({ sel: null });
              }}
            />
          ) : null}
        </aside>
      ) : null}
    </section>
  );
}

function ConfigForm({ config, kinds, defaultKind, onSaved, onDeleted }: { config: ProviderConfigRowFragment | null; kinds: Array<{ name: string; configSchema: JSONValue | null }>; defaultKind: string; onSaved: (c: ProviderConfigRowFragment) => void; onDeleted: () => void }) {
  const { canMutate } = useSession();
  const [kind, setKind] = useState(config?.kind ?? defaultKind ?? '');
  const [name, setName] = useState(config?.name ?? '');
  const [isDefault, setIsDefault] = useState(config?.isDefault ?? false);
  const [spec, setSpec] = useState(prettyJSON(config?.spec ?? {}));
  const [data, setData] = useState(config?.data == null ? '' : prettyJSON(config.data));
  const [confirm, setConfirm] = useState(false);
  const [apply, state] = useMutation(ApplyProviderConfigDocument);
  const [del, delState] = useMutation(DeleteProviderConfigDocument);
  const fe = fieldErrors(state.error, ['kind', 'name', 'spec', 'data']);
  const at = (f: string) => fe.fields.filter((x) => x.field === f);
  const schema = kinds.find((k) => k.name === kind)?.configSchema;
  return (
    <form
      className="editor"
      aria-label="Provider config"
      onSubmit={(e) => {
        e.preventDefault();
        const s = parseJSON(spec);
        const d = parseJSON(data, true);
        if (!s.ok || !d.ok) return;
        apply({ input: { kind, name, isDefault, spec: s.value as JSONValue, data: d.value as JSONValue } }).then((r) => onSaved(r.applyProviderConfig), () => {});
      }}
    >
      <div className="field">
        <label htmlFor="pc-kind">Kind</label>
        <select id="pc-kind" value={kind} onChange={(e) => setKind(e.target.value)} disabled={!!config} aria-invalid={at('kind').length > 0 || undefined}>
          <option value="">Choose a kind</option>
          {[...new Set(kinds.map((k) => k.name))].map((k) => (
            <option key={k}>{k}</option>
          ))}
        </select>
        {at('kind').map((f, i) => (
          <span key={i} className="field-error" role="alert">
            {f.message}
          </span>
        ))}
      </div>
      <div className="field">
        <label htmlFor="pc-name">Name</label>
        <input id="pc-name" value={name} onChange={(e) => setName(e.target.value)} readOnly={!!config} aria-invalid={at('name').length > 0 || undefined} />
        {at('name').map((f, i) => (
          <span key={i} className="field-error" role="alert">
            {f.message}
          </span>
        ))}
      </div>
      <div className="field checkbox">
        <input id="pc-default" type="checkbox" checked={isDefault} onChange={(e) => setIsDefault(e.target.checked)} />
        <label htmlFor="pc-default">The kind's default (primed into every worker)</label>
      </div>
      <JsonEditor label="Spec (JSON, validated against the kind's config schema)" value={spec} onChange={setSpec} errors={at('spec')} rows={10} />
      <JsonEditor label="Data bundle (JSON, optional)" value={data} onChange={setData} errors={at('data')} rows={4} optional />
      {fe.general.length ? <ErrorBox error={fe.general.join('; ')} /> : null}
      <ErrorBox error={delState.error} />
      <div className="form-actions">
        <button type="submit" className="primary" disabled={!canMutate || state.running || !kind || !name}>
          {state.running ? 'Saving…' : config ? 'Save' : 'Create'}
        </button>
        {config ? (
          <button type="button" className="danger" onClick={() => setConfirm(true)} disabled={!canMutate}>
            Delete
          </button>
        ) : null}
      </div>
      {kind ? (
        <details>
          <summary>Config schema of {kind}</summary>
          <JsonView value={schema ?? null} label={`Config schema of ${kind}`} />
        </details>
      ) : null}
      {config ? <p className="muted">Created {formatTime(config.createdAt)} · updated {formatTime(config.updatedAt)}</p> : null}
      {confirm && config ? (
        <ConfirmDialog
          title={`Delete ${config.kind}/${config.name}?`}
          message={<p>Resources that attach it by name fall back to the kind's default on their next schedule.</p>}
          confirm="Delete"
          busy={delState.running}
          onCancel={() => setConfirm(false)}
          onConfirm={() => del({ kind: config.kind, name: config.name }).then(() => { setConfirm(false); onDeleted(); }, () => setConfirm(false))}
        />
      ) : null}
    </form>
  );
}
