// The resources list's server-side filters.
import { useEffect, useState } from 'react';
import { useQuery } from '../client/hooks';
import { PhaseValues, SummaryKindsDocument } from '../gql/graphql';
import { PAGE_SIZES, parseLabelSelector, togglePhase, withFilters, type ListState } from './filters';
import { phaseClass, phaseLabel, PHASE_META } from './mappers';

export function FilterBar({ state, onChange }: { state: ListState; onChange: (s: ListState) => void }) {
  const kinds = useQuery(SummaryKindsDocument, {});
  const names = [...new Set((kinds.data?.kinds ?? []).filter((k) => !k.isReactor).map((k) => k.name))];
  if (state.kind && !names.includes(state.kind)) names.push(state.kind);
  const [labels, setLabels] = useState(state.labels);
  const [owner, setOwner] = useState(state.owner);
  useEffect(() => setLabels(state.labels), [state.labels]);
  useEffect(() => setOwner(state.owner), [state.owner]);
  const sel = parseLabelSelector(labels);
  const dirty = labels !== state.labels || owner !== state.owner;
  const active = state.kind || state.phases.length || state.labels || state.owner;
  return (
    <form
      className="filters"
      aria-label="Resource filters"
      onSubmit={(e) => {
        e.preventDefault();
        if (sel.ok) onChange(withFilters(state, { labels: labels.trim(), owner: owner.trim() }));
      }}
    >
      <div className="field">
        <label htmlFor="f-kind">Kind</label>
        <select id="f-kind" value={state.kind} onChange={(e) => onChange(withFilters(state, { kind: e.target.value }))}>
          <option value="">All kinds</option>
          {names.map((n) => (
            <option key={n} value={n}>
              {n}
            </option>
          ))}
        </select>
      </div>
      <fieldset className="chips">
        <legend>Phase</legend>
        {PhaseValues.map((p) => {
          const on = state.phases.includes(p);
          return (
            <button key={p} type="button" className={`chip ${phaseClass(p)}${on ? ' on' : ''}`} aria-pressed={on} title={PHASE_META[p].help} data-phase-chip={p} onClick={() => onChange(togglePhase(state, p))}>
              {phaseLabel(p)}
            </button>
          );
        })}
      </fieldset>
      <div className="field">
        <label htmlFor="f-labels">Labels</label>
        <input id="f-labels" placeholder="team=a,env=prod" value={labels} aria-invalid={!sel.ok || undefined} aria-describedby={!sel.ok ? 'f-labels-err' : undefined} onChange={(e) => setLabels(e.target.value)} />
        {!sel.ok ? (
          <span className="field-error" id="f-labels-err" role="alert">
            {sel.error}
          </span>
        ) : null}
      </div>
      <div className="field">
        <label htmlFor="f-owner">Owner id</label>
        <input id="f-owner" placeholder="children of…" value={owner} onChange={(e) => setOwner(e.target.value)} size={12} />
      </div>
      <div className="field">
        <label htmlFor="f-size">Page size</label>
        <select id="f-size" value={state.size} onChange={(e) => onChange(withFilters(state, { size: Number(e.target.value) }))}>
          {PAGE_SIZES.map((n) => (
            <option key={n} value={n}>
              {n}
            </option>
          ))}
        </select>
      </div>
      <div className="filter-actions">
        <button type="submit" disabled={!dirty || !sel.ok}>
          Apply
        </button>
        <button type="button" disabled={!active} onClick={() => onChange(withFilters(state, { kind: '', phases: [], labels: '', owner: '' }))}>
          Clear
        </button>
      </div>
    </form>
  );
}
