// @vitest-environment jsdom
import { cleanup, render, screen } from '@testing-library/react';
import { afterEach, describe, expect, it } from 'vitest';
import { JsonEditor } from './JsonEditor';

afterEach(cleanup);

describe('JsonEditor', () => {
  it('marks the line a server field error points at and names the pointer', () => {
    const text = '{\n  "name": "a",\n  "spokes": -1\n}';
    render(<JsonEditor label="Spec" value={text} errors={[{ pointer: '/spokes', message: 'must be >= 0' }]} />);
    const box = screen.getByLabelText('Spec');
    expect(box.getAttribute('aria-invalid')).toBe('true');
    const alert = screen.getByRole('alert');
    expect(alert.textContent).toContain('/spokes');
    expect(alert.textContent).toContain('line 3');
    expect(alert.textContent).toContain('must be >= 0');
    const marked = document.querySelectorAll('.json-gutter .err');
    expect(marked).toHaveLength(1);
    expect(marked[0]!.textContent?.trim()).toBe('3');
  });

  it('reports invalid JSON before anything is sent', () => {
    render(<JsonEditor label="Spec" value="{oops" />);
    expect(screen.getByRole('alert').textContent).toContain('not valid JSON');
  });

  it('allows blank optional fields', () => {
    render(<JsonEditor label="Data" value="" optional />);
    expect(screen.queryByRole('alert')).toBeNull();
  });
});
