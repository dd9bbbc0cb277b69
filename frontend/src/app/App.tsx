// The dashboard's shell: navigation, the live indicator and the page the
// path selects. The graph view is a lazy chunk; GraphiQL is its own page.
import { lazy, Suspense } from 'react';
import { BindingsPage } from '../bindings/BindingsPage';
import { ClusterPage } from '../cluster/ClusterPage';
import { ConfigsPage } from '../configs/ConfigsPage';
import { KindsPage } from '../kinds/KindsPage';
import { ResourcesPage } from '../resources/ResourcesPage';
import { SummaryPage } from '../resources/SummaryPage';
import { PageErrorBoundary } from '../widgets/PageErrorBoundary';
import { LiveIndicator } from './LiveIndicator';
import { Link, useLocation } from './router';
import { SessionProvider, useSession } from './session';

const GraphPage = lazy(() => import('../graph/GraphPage'));

const NAV = [
  { to: '/', label: 'Summary' },
  { to: '/resources', label: 'Resources' },
  { to: '/kinds', label: 'Kinds' },
  { to: '/configs', label: 'Provider configs' },
  { to: '/bindings', label: 'Reactor bindings' },
  { to: '/cluster', label: 'Cluster' },
] as const;

function Page({ path }: { path: string }) {
  switch (path) {
    case '/':
      return <SummaryPage />;
    case '/resources':
      return <ResourcesPage />;
    case '/graph':
      return (
        <Suspense fallback={<p className="muted">Loading the graph view…</p>}>
          <GraphPage />
        </Suspense>
      );
    case '/kinds':
      return <KindsPage />;
    case '/configs':
      return <ConfigsPage />;
    case '/bindings':
      return <BindingsPage />;
    case '/cluster':
      return <ClusterPage />;
    default:
      return (
        <section>
          <h1>Not found</h1>
          <p>
            Nothing lives at <code>{path}</code>. <Link to="/">Go to the summary</Link>.
          </p>
        </section>
      );
  }
}

function Header() {
  const { path } = useLocation();
  const s = useSession();
  const section = path === '/graph' ? '/resources' : path;
  return (
    <header className="topbar">
      <a className="skip-link" href="#main">
        Skip to content
      </a>
      <Link to="/" className="brand">
        converge
      </Link>
      <nav aria-label="Main">
        <ul>
          {NAV.map((n) => (
            <li key={n.to}>
              <Link to={n.to} aria-current={section === n.to ? 'page' : undefined}>
                {n.label}
              </Link>
            </li>
          ))}
          <li>
            <a href="/graphiql">GraphiQL</a>
          </li>
        </ul>
      </nav>
      <div className="topbar-end">
        <LiveIndicator />
        <button type="button" className="link" onClick={s.openToken} title="Set the API bearer token">
          {s.role ? (s.role === 'ADMIN' ? 'admin' : 'viewer') : 'token'}
        </button>
        {s.version ? <span className="muted version">{s.version}</span> : null}
      </div>
    </header>
  );
}

export function App() {
  const { path } = useLocation();
  const page = path.length > 1 ? path.replace(/\/+$/, '') : path;
  return (
    <SessionProvider>
      <Header />
      <main id="main" tabIndex={-1}>
        {/* Keyed on the path: another page starts without the failed one's error. */}
        <PageErrorBoundary key={page}>
          <Page path={page} />
        </PageErrorBoundary>
      </main>
    </SessionProvider>
  );
}
