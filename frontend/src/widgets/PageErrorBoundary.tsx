// A page that throws while it renders shows why in its place, and the rest
// of the dashboard (the navigation, the live indicator) stays: without it
// React unmounts the whole root and leaves a blank window. The usual cause
// in production is an upgrade: a page loaded before it asks for a lazy
// chunk (the graph view, the Summary's charts) by its old content hash, the
// new server answers 404, and only a reload of the dashboard fixes it.
import { Component, type ReactNode } from 'react';

/** isChunkLoadError: the error a browser gives when a lazy chunk cannot be fetched. */
export function isChunkLoadError(e: Error): boolean {
  // Chromium, Firefox, Safari, and Vite's CSS preload of a lazy chunk.
  return /Failed to fetch dynamically imported module|error loading dynamically imported module|Importing a module script failed|Unable to preload CSS/i.test(e.message);
}

export class PageErrorBoundary extends Component<{ children: ReactNode }, { error: Error | null }> {
  state: { error: Error | null } = { error: null };

  static getDerivedStateFromError(e: unknown): { error: Error } {
    return { error: e instanceof Error ? e : new Error(String(e)) };
  }

  render() {
    const { error } = this.state;
    if (!error) return this.props.children;
    const stale = isChunkLoadError(error);
    return (
      <section className="page">
        <h1>{stale ? 'The dashboard was updated' : 'This page failed'}</h1>
        <div className="error-box" role="alert">
          {stale ? 'The server now runs a newer dashboard, and this page’s code is no longer there: reload the dashboard to get the new one.' : 'This page hit an error while drawing it. The other pages still work; a reload may help.'}{' '}
          <span className="muted">({error.message})</span>
        </div>
        <p>
          <button type="button" className="primary" onClick={() => window.location.reload()}>
            Reload the dashboard
          </button>
        </p>
      </section>
    );
  }
}
