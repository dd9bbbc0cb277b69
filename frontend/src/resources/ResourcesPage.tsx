// Resources: the filtered, keyset-paginated list, live, with the selected
// resource's detail panel beside it. All state is in the URL.
import { useMemo } from 'react';
import { navigate, useLocation, withQuery } from '../app/router';
import type { ResourceRowFragment } from '../gql/graphql';
import { ErrorBox } from '../widgets/ErrorBox';
import { Pager } from '../widgets/Pager';
import { DetailPanel } from './DetailPanel';
import { FilterBar } from './FilterBar';
import { listSearch, nextPage, pageNumber, parseListState, prevPage, queryVariables, withFilters, type ListState } from './filters';
import { ResourceTable } from './ResourceTable';
import { useLivePage } from './useLivePage';

export function resourcesHref(s: ListState): string {
  return withQuery('/resources', listSearch(s));
}

export function ResourcesPage() {
  const { search } = useLocation();
  const state = useMemo(() => parseListState(search), [search.toString()]);
  const vars = useMemo(() => queryVariables(state), [state.kind, state.phases.join(), state.labels, state.owner, state.size, state.cursors.join()]);
  const live = useLivePage(vars);
  const go = (s: ListState) => navigate(resourcesHref(s));
  const hrefOf = (r: ResourceRowFragment) => resourcesHref({ ...state, sel: { kind: r.kind, name: r.name } });
  const ownerHrefOf = (r: ResourceRowFragment) => (r.owner ? resourcesHref({ ...state, sel: { kind: r.owner.kind, name: r.owner.name } }) : null);
  const selectedId = state.sel ? (live.page.rows.find((e) => e.row.kind === state.sel!.kind && e.row.name === state.sel!.name)?.row.id ?? null) : null;
  return (
    <section className={`page resources-page${state.sel ? ' with-detail' : ''}`}>
      <div className="list-pane">
        <h1>Resources</h1>
        <FilterBar state={state} onChange={(s) => go({ ...s, sel: state.sel })} />
        <ErrorBox error={live.error} />
        {live.page.overflow ? (
          <div className="notice" role="status">
            More resources arrived than this page shows.{' '}
            <button type="button" className="link" onClick={live.refetch}>
              Reload the page
            </button>
          </div>
        ) : null}
        <Pager
          label="Resource pages"
          count={live.page.rows.length}
          noun="resource"
          page={pageNumber(state)}
          hasPrev={state.cursors.length > 0}
          hasNext={!!live.nextCursor}
          onPrev={() => go(prevPage(state))}
          onNext={() => live.nextCursor && go(nextPage(state, live.nextCursor))}
        />
        {live.loaded && live.page.rows.length === 0 && live.nextCursor ? (
          <p className="empty" data-testid="empty-page">
            None of the resources read for this page match these filters; more may follow (Next →).
          </p>
        ) : live.loaded && live.page.rows.length === 0 ? (
          <p className="empty" data-testid="empty-list">
            No resources match these filters.
          </p>
        ) : (
          <ResourceTable rows={live.page.rows} selectedId={selectedId} hrefOf={hrefOf} ownerHrefOf={ownerHrefOf} caption={`Resources, page ${pageNumber(state)}`} fetchedAt={live.fetchedAt} measure="converge:resources-render" />
        )}
        {live.loading && !live.loaded ? <p className="muted">Loading…</p> : null}
      </div>
      {state.sel ? (
        <DetailPanel
          key={`${state.sel.kind}/${state.sel.name}`}
          target={state.sel}
          onClose={() => go({ ...state, sel: null })}
          hrefOf={(ref) => resourcesHref({ ...state, sel: ref })}
          childrenHref={(id) => resourcesHref(withFilters({ ...state, sel: null }, { owner: id, kind: '', phases: [], labels: '' }))}
        />
      ) : null}
    </section>
  );
}
