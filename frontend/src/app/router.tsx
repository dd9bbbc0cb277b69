// A small History-API router: the path picks the page, the query string
// holds the page's state (filters, selection, view), so every screen is a
// shareable link and Back/Forward walk through it.
import { useSyncExternalStore, type AnchorHTMLAttributes, type MouseEvent } from 'react';

const NAV_EVENT = 'converge:navigate';

function subscribe(fn: () => void): () => void {
  window.addEventListener('popstate', fn);
  window.addEventListener(NAV_EVENT, fn);
  return () => {
    window.removeEventListener('popstate', fn);
    window.removeEventListener(NAV_EVENT, fn);
  };
}

const href = () => window.location.pathname + window.location.search;

/** The current path and query string; re-renders on navigation. */
export function useLocation(): { path: string; search: URLSearchParams; href: string } {
  const h = useSyncExternalStore(subscribe, href, href);
  const i = h.indexOf('?');
  const path = i < 0 ? h : h.slice(0, i);
  return { path, search: new URLSearchParams(i < 0 ? '' : h.slice(i + 1)), href: h };
}

/** navigate pushes (or replaces) a URL inside the app. */
export function navigate(to: string, opts: { replace?: boolean } = {}) {
  if (to === href()) return;
  if (opts.replace) window.history.replaceState(null, '', to);
  else window.history.pushState(null, '', to);
  window.dispatchEvent(new Event(NAV_EVENT));
}

/** withQuery renders path plus a query string, dropping empty parameters. */
export function withQuery(path: string, params: URLSearchParams): string {
  const q = params.toString();
  return q ? `${path}?${q}` : path;
}

/** Link is an anchor that navigates inside the app (modifier clicks open new tabs as usual). */
export function Link({ to, onClick, ...rest }: { to: string } & AnchorHTMLAttributes<HTMLAnchorElement>) {
  const click = (e: MouseEvent<HTMLAnchorElement>) => {
    onClick?.(e);
    if (e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
    e.preventDefault();
    navigate(to);
  };
  return <a href={to} onClick={click} {...rest} />;
}
