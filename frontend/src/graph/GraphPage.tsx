// The graph view (a lazy chunk): a composite's subtree and its dependency
// edges, laid out automatically, every node coloured by its live phase and
// the paths to failures highlighted. URL: /graph?root=kind/name&sel=kind/name.
import { useCallback, useEffect, useMemo, useRef, useState } from 'react';
import { Link, navigate, useLocation, withQuery } from '../app/router';
import { useClient, useConnection } from '../client/hooks';
import { toApiError, type ApiError } from '../client/errors';
import { GraphChangedDocument, PhaseValues } from '../gql/graphql';
import { emptyList, listSearch, parseRef, refString, type ResourceRef } from '../resources/filters';
import { phaseClass, phaseLabel } from '../resources/mappers';
import { PhaseBadge } from '../resources/PhaseBadge';
import { ErrorBox } from '../widgets/ErrorBox';
import { GraphCanvas } from './GraphCanvas';
import { failurePaths } from './failures';
import { fold, isAggregate } from './fold';
import { layout, type GraphInput } from './layout';
import { applyGraphEvent, cloneTree, loadMore, loadSubtree, mergeLoaded, NODE_BUDGET, type Subtree } from './load';

/**
 * The most per-owner subscriptions the view opens for a nested composite
 * (past it, one unfiltered subscription). A top-level root needs one:
 * resourceChanged(rootId:) carries its whole subtree.
 */
const MAX_OWNER_SUBS = 40;

type Event = Parameters<typeof applyGraphEvent>[1];

export default function GraphPage() {
  const { search } = useLocation();
  const root = parseRef(search.get('root'));
  const sel = parseRef(search.get('sel'));
  const client = useClient();
  const { epoch, generation } = useConnection();
  const [tree, setTree] = useState<Subtree | null>(null);
  const [structure, setStructure] = useState(0);
  const [error, setError] = useState<ApiError | null>(null);
  const [loading, setLoading] = useState(false);
  const [missing, setMissing] = useState(false);
  const [reload, setReload] = useState(0);
  const budget = useRef(NODE_BUDGET);
  const rootKey = root ? refString(root) : '';
  const treeRef = useRef(tree);
  treeRef.current = tree;
  // The open subscriptions of this load: the root's own ('root') and, for a
  // top-level root, one for its whole subtree ('tree'); for a nested
  // composite, one per owner (key: its id), or one unfiltered ('*') past
  // MAX_OWNER_SUBS.
  const subs = useRef(new Map<string, () => void>());
  const watchRef = useRef<(ownerId: string) => void>(() => {});

  // React may run a state updater lazily, after the callback that queued it
  // returns, so what an event changed is recorded in a ref by the updater and
  // acted on once the new tree has rendered (a live-added node used to be
  // counted but never laid out).
  const pending = useRef({ structural: false, resync: false });
  const onEvent = useCallback((ev: Event) => {
    setTree((t) => {
      if (!t) return t;
      const r = applyGraphEvent(t, ev, budget.current);
      if (r.structural) pending.current.structural = true;
      if (r.resync) pending.current.resync = true;
      return r.tree;
    });
  }, []);
  useEffect(() => {
    const p = pending.current;
    if (p.structural) {
      p.structural = false;
      setStructure((s) => s + 1);
    }
    if (p.resync) {
      p.resync = false;
      setReload((n) => n + 1);
    }
  }, [tree]);

  useEffect(() => {
    if (!root) return;
    const ctrl = new AbortController();
    const open = subs.current;
    // Events that arrive while the subtree loads wait for it.
    let buffer: Event[] | null = [];
    const sink = { next: (d: { resourceChanged: Event }) => (buffer ? buffer.push(d.resourceChanged) : onEvent(d.resourceChanged)) };
    // Subscribe before reading: nothing changes unseen between the two.
    let topLevel = false;
    const watch = (ownerId: string) => {
      if (open.has('tree') || open.has(ownerId) || open.has('*')) return;
      if (topLevel) open.set('tree', client.subscribe(GraphChangedDocument, { rootId: ownerId }, sink));
      else if (open.size <= MAX_OWNER_SUBS) open.set(ownerId, client.subscribe(GraphChangedDocument, { ownerId }, sink));
      else open.set('*', client.subscribe(GraphChangedDocument, {}, sink));
    };
    watchRef.current = watch;
    open.set('root', client.subscribe(GraphChangedDocument, { kind: root.kind, name: root.name }, sink));
    setLoading(true);
    loadSubtree(client, root, budget.current, ctrl.signal, watch, (n) => (topLevel = n.owner === null)).then(
      (t) => {
        if (ctrl.signal.aborted) return;
        let cur = t;
        for (const ev of buffer ?? []) if (cur) cur = applyGraphEvent(cur, ev, budget.current).tree;
        buffer = null;
        setLoading(false);
        setMissing(!cur);
        setTree(cur);
        setStructure((s) => s + 1);
        setError(null);
      },
      (e) => {
        if (ctrl.signal.aborted) return;
        buffer = null;
        setLoading(false);
        setError(toApiError(e));
      },
    );
    return () => {
      ctrl.abort();
      for (const stop of open.values()) stop();
      open.clear();
    };
  }, [client, rootKey, epoch, generation, reload, onEvent]);

  // Read more of the subtree into a copy (the shown tree keeps taking
  // events), then fold it in. only: which owners to continue.
  const reading = useRef(new Set<string>()); // owners being read
  const readMore = useCallback(
    (t: Subtree, only: (cursor: string) => boolean) => {
      const copy = cloneTree(t);
      for (const [id, cursor] of copy.more) if (!only(cursor) || reading.current.has(id)) copy.more.delete(id);
      const started = new Set(copy.more.keys());
      if (started.size === 0) return;
      for (const id of started) reading.current.add(id);
      const done = () => {
        for (const id of started) reading.current.delete(id);
      };
      loadMore(client, copy, budget.current, undefined, watchRef.current).then(
        () => {
          done();
          setTree((cur) => (cur ? mergeLoaded(cur, copy, started) : cur));
          setStructure((s) => s + 1);
        },
        (e) => {
          done();
          setError(toApiError(e));
        },
      );
    },
    [client],
  );
  // A composite that appeared live: watch it, then read its children.
  useEffect(() => {
    const t = treeRef.current;
    if (t && !loading && t.nodes.size < budget.current && [...t.more.values()].includes('')) readMore(t, (c) => c === '');
  }, [structure]); // only after structural changes

  // Siblings of one kind in one tier fold into an aggregate until expanded
  // (a click on it). The picture is re-folded on every change (phases
  // recolour the aggregates' bars); the layout follows the structure only.
  const [expanded, setExpanded] = useState<ReadonlySet<string>>(new Set());
  useEffect(() => setExpanded(new Set()), [rootKey]);
  const shown = useMemo(() => (tree ? fold(tree.nodes, tree.rootId, expanded) : null), [tree, expanded]);
  const shownRef = useRef(shown);
  shownRef.current = shown;
  const inputs: GraphInput[] = useMemo(() => (shown ? [...shown.nodes.values()].map((n) => ({ id: n.id, owner: n.owner, deps: n.deps, sortKey: `${n.kind}/${n.name}` })) : []), [structure, expanded]);
  const lay = useMemo(() => (tree ? layout(tree.rootId, inputs) : null), [inputs]);
  const highlight = useMemo(() => failurePaths(shown ? [...shown.nodes.values()] : [], (id) => shown?.nodes.get(id)?.phase), [shown]);
  const failedReal = useMemo(() => (tree ? [...tree.nodes.values()].filter((n) => n.phase === 'FAILED').map((n) => n.id) : []), [tree]);

  const selectedReal = useMemo(() => (tree && sel ? ([...tree.nodes.values()].find((n) => n.kind === sel.kind && n.name === sel.name)?.id ?? null) : null), [tree, sel?.kind, sel?.name]);
  const selectedId = selectedReal ? (shown?.shownAs.get(selectedReal) ?? selectedReal) : null;
  const selected = selectedReal ? tree?.nodes.get(selectedReal) : undefined;
  const graphHref = (s: ResourceRef | null) => {
    const q = new URLSearchParams();
    if (root) q.set('root', refString(root));
    if (s) q.set('sel', refString(s));
    return withQuery('/graph', q);
  };
  const onSelect = useCallback(
    (id: string) => {
      if (isAggregate(id)) {
        setExpanded((e) => new Set([...e, id]));
        setStructure((x) => x + 1);
        return;
      }
      const n = treeRef.current?.nodes.get(id);
      if (n) navigate(graphHref({ kind: n.kind, name: n.name }), { replace: true });
    },
    [rootKey],
  );
  const resourcesHref = (r: ResourceRef) => `/resources?${listSearch({ ...emptyList, sel: r }).toString()}`;

  if (!root) {
    return (
      <section className="page">
        <h1>Graph</h1>
        <p>
          Pick a composite resource in the <Link to="/resources">resource list</Link> and choose <em>Graph</em> in its detail panel.
        </p>
      </section>
    );
  }
  const rootNode = tree?.nodes.get(tree.rootId);
  return (
    <section className="page graph-page">
      <header className="graph-head">
        <h1>
          Graph of <Link to={resourcesHref(root)}>{refString(root)}</Link> {rootNode ? <PhaseBadge phase={rootNode.phase} /> : null}
        </h1>
        <p className="muted" data-testid="graph-size">
          {tree ? `${tree.nodes.size.toLocaleString('en-US')} nodes loaded` : loading ? 'Loading…' : ''}
          {tree && tree.more.size ? (
            <>
              {' '}
              · more children not loaded{' '}
              <button
                type="button"
                className="link"
                onClick={() => {
                  budget.current += NODE_BUDGET;
                  readMore(tree, () => true);
                }}
              >
                Load {NODE_BUDGET.toLocaleString('en-US')} more
              </button>
            </>
          ) : null}
        </p>
      </header>
      <ErrorBox error={error} />
      {missing ? <p className="empty">{refString(root)} does not exist.</p> : null}
      <div className="graph-layout">
        {lay && tree && shown ? <GraphCanvas layout={lay} nodes={shown.nodes} aggregates={shown.aggregates} highlight={highlight} selected={selectedId} onSelect={onSelect} /> : null}
        <aside className="graph-side" aria-label="Graph details">
          <h2>Legend</h2>
          <ul className="legend">
            {PhaseValues.map((p) => (
              <li key={p}>
                <span className={`swatch ${phaseClass(p)}`} aria-hidden="true" /> {phaseLabel(p)}
              </li>
            ))}
            <li>
              <span className="swatch edge-own" aria-hidden="true" /> owns
            </li>
            <li>
              <span className="swatch edge-dep" aria-hidden="true" /> depends on (arrow to the dependent)
            </li>
            <li>
              <span className="swatch hot" aria-hidden="true" /> path to a failure
            </li>
          </ul>
          <h2>Failures</h2>
          {failedReal.length === 0 ? (
            <p className="muted" data-testid="failures">
              none
            </p>
          ) : (
            <ul data-testid="failures">
              {failedReal.slice(0, 50).map((id) => {
                const n = tree!.nodes.get(id)!;
                return (
                  <li key={id}>
                    <Link to={graphHref(n)}>{`${n.kind}/${n.name}`}</Link>
                  </li>
                );
              })}
              {failedReal.length > 50 ? <li className="muted">and more</li> : null}
            </ul>
          )}
          {selected ? (
            <>
              <h2>Selected</h2>
              <p>
                {selected.kind}/{selected.name} <PhaseBadge phase={selected.phase} />
              </p>
              <p>
                <Link to={resourcesHref(selected)}>Open its detail</Link>
              </p>
            </>
          ) : null}
        </aside>
      </div>
    </section>
  );
}
