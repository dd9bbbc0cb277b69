// The graph view (a lazy chunk): a composite's subtree and its dependency
// edges, laid out automatically, every node coloured by its live phase and
// the paths to failures highlighted. URL: /graph?root=kind/name&sel=kind/name.
import { useCallback, useEffect, useLayoutEffect, useMemo, useRef, useState } from 'react';
import { flushSync } from 'react-dom';
import { Link, navigate, useLocation, withQuery } from '../app/router';
import { backoff } from '../client/client';
import { FINAL_CODES, useClient, useConnection } from '../client/hooks';
import { toApiError, type ApiError } from '../client/errors';
import { GraphChangedDocument, PhaseValues } from '../gql/graphql';
import { emptyList, listSearch, parseRef, refString, type ResourceRef } from '../resources/filters';
import { phaseClass, phaseLabel } from '../resources/mappers';
import { PhaseBadge } from '../resources/PhaseBadge';
import { ErrorBox } from '../widgets/ErrorBox';
import { GraphCanvas } from './GraphCanvas';
import { failurePaths } from './failures';
import { fold, isAggregate, recolour, type Folded } from './fold';
import { defaultLayout, layout, type GraphInput } from './layout';
import { applyGraphEvent, applyGraphEvents, cloneTree, loadMore, loadSubtree, mergeLoaded, NODE_BUDGET, type Subtree } from './load';
import { findNode, revealIn } from './search';
import { GraphFailures } from './GraphFailures';

/**
 * The most per-owner subscriptions the view opens for a nested composite
 * (past it, one unfiltered subscription). A top-level root needs one:
 * resourceChanged(rootId:) carries its whole subtree.
 */
const MAX_OWNER_SUBS = 40;

type Event = Parameters<typeof applyGraphEvent>[1];

/** Live events are applied in batches, at most one per this many ms. */
const BATCH_MS = 30;

/**
 * GraphStats is what the page measures of its live updates, on
 * window.__convergeGraph (the browser test reads it): batches applied, the
 * events in them, and each batch's time from applying it to the next frame
 * after React Flow drew it.
 */
export interface GraphStats {
  batches: number;
  events: number;
  lastMs: number;
  maxMs: number;
  totalMs: number;
  /** Each batch's time, the first 5,000. */
  each?: number[];
  /** Each batch's time to React's commit of the page (before React Flow's own update and the paint). */
  commits?: number[];
}
declare global {
  interface Window {
    __convergeGraph?: GraphStats;
  }
}

export default function GraphPage() {
  const { search } = useLocation();
  const root = parseRef(search.get('root'));
  const sel = parseRef(search.get('sel'));
  const client = useClient();
  const { epoch, generation } = useConnection();
  const [tree, setTree] = useState<Subtree | null>(null);
  const [structure, setStructure] = useState(0);
  const [error, setError] = useState<ApiError | null>(null);
  // The server refused or ended a subscription the view follows the
  // subtree by (a limit, a missing root): the picture is no longer live.
  const [liveError, setLiveError] = useState<ApiError | null>(null);
  // Reloads in a row after a subscription ended with an internal error
  // (the backoff's attempt; a pushed event resets it).
  const liveAttempt = useRef(0);
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
  // The current load's abort signal and watch, for the reads readMore starts
  // later: both end with the load (unmount, reload, reconnection), so a read
  // still in flight then neither opens a subscription nor updates the page.
  const load = useRef<{ signal: AbortSignal; watch: (ownerId: string) => void } | null>(null);

  // React may run a state updater lazily, after the callback that queued it
  // returns, so what an event changed is recorded in a ref by the updater and
  // acted on once the new tree has rendered (a live-added node used to be
  // counted but never laid out).
  const pending = useRef({ structural: false, resync: false, batchAt: 0, events: 0 });
  // Events queue and are applied together, at most every BATCH_MS: a storm
  // of a thousand phase changes is a few re-renders, not a thousand.
  const queue = useRef<Event[]>([]);
  const timer = useRef<ReturnType<typeof setTimeout> | null>(null);
  const flush = useCallback(() => {
    timer.current = null;
    const evs = queue.current;
    queue.current = [];
    if (!evs.length) return;
    pending.current.batchAt = performance.now();
    pending.current.events += evs.length;
    // Rendered and committed in this task (flushSync): left to React's
    // scheduler, the render waited for a task of its own, and under CPU
    // contention that queueing (not the render) was most of a batch's time.
    flushSync(() =>
      setTree((t) => {
        if (!t) return t;
        const r = applyGraphEvents(t, evs, budget.current);
        if (r.structural) pending.current.structural = true;
        if (r.resync) pending.current.resync = true;
        return r.tree;
      }),
    );
  }, []);
  const onEvent = useCallback(
    (ev: Event) => {
      queue.current.push(ev);
      timer.current ??= setTimeout(flush, BATCH_MS);
    },
    [flush],
  );
  useEffect(() => () => void (timer.current && clearTimeout(timer.current)), []);
  useLayoutEffect(() => {
    const p = pending.current;
    if (p.batchAt) {
      const t0 = p.batchAt;
      const events = p.events;
      const commit = performance.now() - t0;
      p.batchAt = 0;
      p.events = 0;
      requestAnimationFrame(() => {
        const ms = performance.now() - t0;
        const s = (window.__convergeGraph ??= { batches: 0, events: 0, lastMs: 0, maxMs: 0, totalMs: 0 });
        s.batches++;
        s.events += events;
        s.lastMs = ms;
        s.maxMs = Math.max(s.maxMs, ms);
        s.totalMs += ms;
        if ((s.each ??= []).length < 5000) s.each.push(ms);
        if ((s.commits ??= []).length < 5000) s.commits.push(commit);
      });
    }
  }, [tree]);
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
    // A subscription the server ends while the socket stays up: one it
    // refused for good (a limit, a bad argument) is shown; after another
    // error (an internal one) the view loads and subscribes again, after the
    // reconnect backoff.
    let retry: ReturnType<typeof setTimeout> | null = null;
    setLiveError(null);
    const sink = {
      next: (d: { resourceChanged: Event }) => {
        liveAttempt.current = 0;
        if (buffer) buffer.push(d.resourceChanged);
        else onEvent(d.resourceChanged);
      },
      error: (e: ApiError, ended: boolean) => {
        if (!ended || ctrl.signal.aborted) return;
        if (FINAL_CODES.has(e.code)) setLiveError(e);
        else retry ??= setTimeout(() => setReload((n) => n + 1), backoff(liveAttempt.current++));
      },
    };
    // Subscribe before reading: nothing changes unseen between the two.
    let topLevel = false;
    const watch = (ownerId: string) => {
      if (ctrl.signal.aborted) return; // the load ended: nothing would close it
      if (open.has('tree') || open.has(ownerId) || open.has('*')) return;
      if (topLevel) open.set('tree', client.subscribe(GraphChangedDocument, { rootId: ownerId }, sink));
      else if (open.size <= MAX_OWNER_SUBS) open.set(ownerId, client.subscribe(GraphChangedDocument, { ownerId }, sink));
      else open.set('*', client.subscribe(GraphChangedDocument, {}, sink));
    };
    load.current = { signal: ctrl.signal, watch };
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
      if (retry) clearTimeout(retry);
      if (load.current?.signal === ctrl.signal) load.current = null;
      for (const stop of open.values()) stop();
      open.clear();
    };
  }, [client, rootKey, epoch, generation, reload, onEvent]);

  // Read more of the subtree into a copy (the shown tree keeps taking
  // events), then fold it in. only: which owners to continue.
  const reading = useRef(new Set<string>()); // owners being read
  const readMore = useCallback(
    (t: Subtree, only: (cursor: string) => boolean) => {
      const cur = load.current;
      if (!cur || cur.signal.aborted) return;
      const { signal, watch } = cur;
      const copy = cloneTree(t);
      for (const [id, cursor] of copy.more) if (!only(cursor) || reading.current.has(id)) copy.more.delete(id);
      const started = new Set(copy.more.keys());
      if (started.size === 0) return;
      for (const id of started) reading.current.add(id);
      const done = () => {
        for (const id of started) reading.current.delete(id);
      };
      loadMore(client, copy, budget.current, signal, watch).then(
        () => {
          done();
          if (signal.aborted) return; // a reload reads it all again
          setTree((cur) => (cur ? mergeLoaded(cur, copy, started) : cur));
          setStructure((s) => s + 1);
        },
        (e) => {
          done();
          if (signal.aborted) return;
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
  // A batch of phase changes recolours the last picture (O(changes)); any
  // other change folds again (O(n)).
  const lastFold = useRef<{ nodes: Subtree['nodes']; rootId: string; expanded: ReadonlySet<string>; folded: Folded } | null>(null);
  const shown = useMemo(() => {
    if (!tree) return null;
    const last = lastFold.current;
    const folded = (last && last.rootId === tree.rootId && last.expanded === expanded && recolour(last.folded, last.nodes, tree.nodes)) || fold(tree.nodes, tree.rootId, expanded);
    lastFold.current = { nodes: tree.nodes, rootId: tree.rootId, expanded, folded };
    return folded;
  }, [tree, expanded]);
  const shownRef = useRef(shown);
  shownRef.current = shown;
  const inputs: GraphInput[] = useMemo(() => (shown ? [...shown.nodes.values()].map((n) => ({ id: n.id, owner: n.owner, deps: n.deps, sortKey: `${n.kind}/${n.name}` })) : []), [structure, expanded]);
  const lay = useMemo(() => (tree ? layout(tree.rootId, inputs, defaultLayout, shownRef.current?.blocks) : null), [inputs]);
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
  // Search: find a node by name, unfold what hides it, select it and centre on it.
  const [query, setQuery] = useState('');
  const [notFound, setNotFound] = useState('');
  const [focus, setFocus] = useState<{ id: string; n: number } | null>(null);
  const names = useMemo(() => (tree ? [...new Set([...tree.nodes.values()].map((n) => n.name))].sort().slice(0, 2000) : []), [structure]);
  // Built once per structure: a live batch does not diff 1,000 options.
  const datalist = useMemo(
    () => (
      <datalist id="graph-names">
        {names.map((n) => (
          <option key={n} value={n} />
        ))}
      </datalist>
    ),
    [names],
  );
  const onSearch = (e: React.FormEvent) => {
    e.preventDefault();
    const t = treeRef.current;
    const hit = t ? findNode(t.nodes.values(), query) : undefined;
    if (!t || !hit) {
      setNotFound(query.trim() ? `No node named “${query.trim()}” is loaded.` : '');
      return;
    }
    setNotFound('');
    const exp = revealIn(t.nodes, t.rootId, expanded, hit.id);
    if (exp !== expanded) {
      setExpanded(exp);
      setStructure((x) => x + 1);
    }
    setFocus((f) => ({ id: hit.id, n: (f?.n ?? 0) + 1 }));
    navigate(graphHref({ kind: hit.kind, name: hit.name }), { replace: true });
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
  const onFold = useCallback((id: string) => {
    setExpanded((e) => new Set([...e].filter((x) => x !== id)));
    setStructure((x) => x + 1);
  }, []);
  const resourcesHref = (r: ResourceRef) => `/resources?${listSearch({ ...emptyList, sel: r }).toString()}`;

  // The side panel re-renders when what it shows changes, not on every
  // live batch: the legend never, the failures when their ids do.
  const legend = useMemo(
    () => (
      <>
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
      </>
    ),
    [],
  );
  const failedKey = failedReal.join();
  const failuresList = useMemo(
    () => (tree ? <GraphFailures rootId={tree.rootId} failed={failedReal.map((id) => tree.nodes.get(id)!)} hrefOf={graphHref} /> : null),
    [failedKey, rootKey, tree?.rootId],
  );

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
        <form className="graph-search" role="search" onSubmit={onSearch}>
          <input type="search" aria-label="Find a node by name" placeholder="Find a node by name" list="graph-names" value={query} onChange={(e) => setQuery(e.target.value)} data-testid="graph-search" />
          {datalist}
          <button type="submit">Find</button>
          {notFound ? (
            <span className="muted" role="status">
              {notFound}
            </span>
          ) : null}
        </form>
      </header>
      <ErrorBox error={error} />
      <ErrorBox error={liveError} title="The graph is not live (changes are not followed; reload the page to try again)" />
      {missing ? <p className="empty">{refString(root)} does not exist.</p> : null}
      <div className="graph-layout">
        {lay && tree && shown ? <GraphCanvas layout={lay} nodes={shown.nodes} aggregates={shown.aggregates} highlight={highlight} selected={selectedId} onSelect={onSelect} onFold={onFold} focus={focus} /> : null}
        <aside className="graph-side" aria-label="Graph details">
          {legend}
          {failuresList}
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
