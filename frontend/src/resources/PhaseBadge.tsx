import type { Phase } from '../gql/graphql';
import { PHASE_META, phaseClass, phaseLabel } from './mappers';

/** PhaseBadge shows a phase as the server computed it. */
export function PhaseBadge({ phase }: { phase: Phase }) {
  return (
    <span className={`badge ${phaseClass(phase)}`} title={PHASE_META[phase]?.help} data-phase={phase}>
      {phaseLabel(phase)}
    </span>
  );
}
