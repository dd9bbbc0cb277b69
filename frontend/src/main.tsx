// The dashboard's entry point.
import { StrictMode } from 'react';
import { createRoot } from 'react-dom/client';
import { App } from './app/App';
import { ApiClient, apiUrls, storedToken } from './client/client';
import { ClientProvider } from './client/hooks';
import './app/styles.css';

const client = new ApiClient({ ...apiUrls(), token: storedToken });

createRoot(document.getElementById('root')!).render(
  <StrictMode>
    <ClientProvider client={client}>
      <App />
    </ClientProvider>
  </StrictMode>,
);
