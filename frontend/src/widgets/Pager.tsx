// Keyset pagination controls: "N items · page K", Prev and Next. No totals.
export function Pager({ count, page, noun, plural, hasPrev, hasNext, onPrev, onNext, label }: { count: number; page: number; noun: string; plural?: string; hasPrev: boolean; hasNext: boolean; onPrev: () => void; onNext: () => void; label: string }) {
  return (
    <nav className="pager" aria-label={label}>
      <span className="pager-count" aria-live="polite">
        {count.toLocaleString('en-US')} {count === 1 ? noun : (plural ?? `${noun}s`)} · page {page}
      </span>
      <button type="button" onClick={onPrev} disabled={!hasPrev}>
        ← Prev
      </button>
      <button type="button" onClick={onNext} disabled={!hasNext}>
        Next →
      </button>
    </nav>
  );
}
