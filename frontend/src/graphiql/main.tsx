// The GraphiQL page (/graphiql): the real GraphiQL, bundled (no CDN), with
// its Monaco workers, queries over HTTP and subscriptions over the same
// graphql-ws websocket protocol the dashboard uses. The bearer token the
// dashboard stored is sent on both.
import 'graphiql/setup-workers/vite';
import 'graphiql/style.css';
import { createGraphiQLFetcher } from '@graphiql/toolkit';
import { GraphiQL } from 'graphiql';
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { apiUrls, storedToken } from '../client/client';
import './graphiql.css';

const { httpUrl, wsUrl } = apiUrls();
const token = storedToken();
const auth: Record<string, string> = token ? { Authorization: `Bearer ${token}` } : {};

const fetcher = createGraphiQLFetcher({
  url: httpUrl,
  subscriptionUrl: wsUrl,
  headers: auth,
  wsConnectionParams: auth,
});

const DEFAULT_QUERY = `# converge's GraphQL API. Open the docs (book icon) to browse the schema.
#
# Subscriptions run over the websocket: replace this with
#   subscription { resourceChanged { type kind name resource { phase } } }
# run it, then change a resource.
query Summary {
  version
  phaseCounts { phase count }
  resources(first: 5) { items { kind name phase } nextCursor }
}
`;

function Logo() {
  return (
    <a href="/" className="graphiql-home">
      ← converge
    </a>
  );
}

createRoot(document.getElementById('graphiql')!).render(
  <StrictMode>
    <GraphiQL fetcher={fetcher} defaultQuery={DEFAULT_QUERY} defaultEditorToolsVisibility={false}>
      <GraphiQL.Logo>
        <Logo />
      </GraphiQL.Logo>
    </GraphiQL>
  </StrictMode>,
);
