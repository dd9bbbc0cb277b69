import { describe, expect, it } from 'vitest';
import { fold } from './fold';
import type { GNode } from './load';
import { findNode, revealIn } from './search';

const n = (id: string, kind: string, owner: string | null, deps: string[] = []): GNode => ({ id, kind, name: id, phase: 'READY', owner, deps, updatedAt: '2026-01-01T00:00:00Z' });

function tree(): Map<string, GNode> {
  // A root with 20 teams (folded, so their vpcs fold with them), each team composing 10 vpcs (folded under the folded teams).
  const m = new Map<string, GNode>([['root', n('root', 'org', null)]]);
  for (let t = 0; t < 20; t++) {
    m.set(`team-${t}`, n(`team-${t}`, 'team', 'root'));
    for (let v = 0; v < 10; v++) m.set(`team-${t}-vpc-${v}`, n(`team-${t}-vpc-${v}`, 'vpc', `team-${t}`));
  }
  return m;
}

describe('findNode', () => {
  it('prefers an exact name, then kind/name, then the first partial match by name', () => {
    const m = tree();
    expect(findNode(m.values(), 'team-3')!.id).toBe('team-3');
    expect(findNode(m.values(), 'vpc/team-3-vpc-2')!.id).toBe('team-3-vpc-2');
    expect(findNode(m.values(), '3-VPC-')!.id).toBe('team-13-vpc-0');
    expect(findNode(m.values(), 'nothing')).toBeUndefined();
    expect(findNode(m.values(), '  ')).toBeUndefined();
  });
});

describe('revealIn', () => {
  it('unfolds level by level until the node is drawn as itself', () => {
    const m = tree();
    const exp = revealIn(m, 'root', new Set(), 'team-3-vpc-2');
    // The vpcs under the folded teams are one aggregate: opening it draws them one by one.
    expect(exp.size).toBe(1);
    expect(fold(m, 'root', exp).shownAs.get('team-3-vpc-2')).toBe('team-3-vpc-2');
  });
  it('returns the same set when the node is already drawn', () => {
    const m = tree();
    const none = new Set<string>();
    expect(revealIn(m, 'root', none, 'root')).toBe(none);
  });
});
