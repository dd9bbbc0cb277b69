// The Summary's charts (a lazy chunk: the counts paint first), drawn by
// uPlot on canvas: the phase totals over time and the settles per minute,
// both from the samples the live totals push. A chart redraws its data in
// place (setData) on every push; it is rebuilt only when its width changes.
import { useEffect, useRef, useState } from 'react';
import uPlot from 'uplot';
import 'uplot/dist/uPlot.min.css';
import { PhaseValues, type Phase } from '../gql/graphql';
import { activity, queueSeries, type QueueSample, type Sample } from './history';
import { phaseLabel } from './mappers';

/** The phase colours of styles.css (canvas cannot read CSS variables cheaply). */
export const PHASE_COLOURS: Record<Phase, string> = {
  READY: '#1a7f37',
  RECONCILING: '#0b63ce',
  DEGRADED: '#b35900',
  FAILED: '#c62828',
  DELETING: '#6e40c9',
  ORPHANED: '#8a6d3b',
  QUARANTINED: '#39424e',
};

const HEIGHT = 200;

/** useWidth follows an element's width (ResizeObserver: no timers). */
function useWidth(ref: React.RefObject<HTMLElement | null>): number {
  const [w, setW] = useState(0);
  useEffect(() => {
    const el = ref.current;
    if (!el) return;
    setW(el.clientWidth);
    const ro = new ResizeObserver(() => setW(el.clientWidth));
    ro.observe(el);
    return () => ro.disconnect();
  }, [ref]);
  return w;
}

/** Chart mounts one uPlot and feeds it data. */
function Chart({ opts, data, label, testid }: { opts: (width: number) => uPlot.Options; data: uPlot.AlignedData; label: string; testid: string }) {
  const box = useRef<HTMLDivElement>(null);
  const plot = useRef<uPlot | null>(null);
  const width = useWidth(box);
  const dataRef = useRef(data);
  dataRef.current = data;
  useEffect(() => {
    if (!box.current || width <= 0) return;
    const p = new uPlot(opts(width), dataRef.current, box.current);
    plot.current = p;
    return () => {
      p.destroy();
      plot.current = null;
    };
  }, [width]); // opts are static per chart
  useEffect(() => {
    plot.current?.setData(data);
  }, [data]);
  return <div ref={box} className="chart" role="img" aria-label={label} data-testid={testid} data-points={data[0]?.length ?? 0} />;
}

const axisStyle = { stroke: '#5b6470', grid: { stroke: '#eef0f3' }, ticks: { stroke: '#d8dde3' } };

export function PhaseChart({ samples }: { samples: readonly Sample[] }) {
  const shown = PhaseValues.filter((p) => samples.some((s) => s.counts[p] > 0));
  const phases = shown.length ? shown : (['READY'] as Phase[]);
  const key = phases.join();
  const data: uPlot.AlignedData = [samples.map((s) => s.t), ...phases.map((p) => samples.map((s) => s.counts[p]))];
  return (
    <Chart
      key={key}
      testid="chart-phases"
      label={`Resources by phase since this page opened: ${phases.map((p) => `${phaseLabel(p)} ${samples[samples.length - 1]?.counts[p] ?? 0}`).join(', ')}`}
      data={data}
      opts={(width) => ({
        width,
        height: HEIGHT,
        legend: { show: true },
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: true } },
        axes: [axisStyle, { ...axisStyle, size: 56 }],
        series: [{}, ...phases.map((p) => ({ label: phaseLabel(p), stroke: PHASE_COLOURS[p], width: 2, paths: uPlot.paths.stepped!({ align: 1 }) }))],
      })}
    />
  );
}

/** xRange is the activity chart's time range: ten minutes up to the last bucket (or now). */
export function xRange(lastBucket: number | null): uPlot.Range.MinMax {
  const end = lastBucket != null && Number.isFinite(lastBucket) ? lastBucket : Math.floor(Date.now() / 60000) * 60;
  return [end - 9 * 60 - 30, end + 90];
}

export function ActivityChart({ samples }: { samples: readonly Sample[] }) {
  const a = activity(samples);
  const data: uPlot.AlignedData = [a.minutes, a.started, a.ready, a.failed];
  const last = a.minutes.length - 1;
  const bars = uPlot.paths.bars!({ size: [0.25, 24], gap: 1 });
  return (
    <Chart
      testid="chart-activity"
      label={last >= 0 ? `This minute: ${a.started[last]} entered Reconciling, ${a.ready[last]} became Ready, ${a.failed[last]} became Failed` : 'No changes since this page opened'}
      data={data}
      opts={(width) => ({
        width,
        height: HEIGHT,
        legend: { show: true },
        cursor: { drag: { x: false, y: false } },
        // The last ten minutes with changes; before any, the current one.
        scales: { x: { time: true, range: (_u, _min, max) => xRange(max) }, y: { range: (_u, _min, max) => [0, Math.max(1, max ?? 1)] } },
        axes: [axisStyle, { ...axisStyle, size: 56 }],
        series: [
          {},
          { label: 'entered Reconciling', stroke: PHASE_COLOURS.RECONCILING, fill: PHASE_COLOURS.RECONCILING + 'cc', paths: bars },
          { label: 'became Ready', stroke: PHASE_COLOURS.READY, fill: PHASE_COLOURS.READY + 'cc', paths: bars },
          { label: 'became Failed', stroke: PHASE_COLOURS.FAILED, fill: PHASE_COLOURS.FAILED + 'cc', paths: bars },
        ],
      })}
    />
  );
}

/** Kind colours of the queue chart (pending solid, in flight dashed). */
const KIND_COLOURS = ['#0b63ce', '#b35900', '#1a7f37', '#6e40c9', '#c62828', '#39424e'];

export function QueueChart({ samples }: { samples: readonly QueueSample[] }) {
  const q = queueSeries(samples);
  const key = q.kinds.map((k) => k.kind).join() || '-';
  const data: uPlot.AlignedData = [q.t, ...q.kinds.flatMap((k) => [k.pending, k.leased])];
  const lastOf = (xs: number[]) => xs[xs.length - 1] ?? 0;
  return (
    <Chart
      key={key}
      testid="chart-queue"
      label={q.kinds.length ? `Work queue now: ${q.kinds.map((k) => `${k.kind} ${lastOf(k.pending)} pending, ${lastOf(k.leased)} in flight`).join('; ')}` : 'The work queue has been empty'}
      data={data}
      opts={(width) => ({
        width,
        height: HEIGHT,
        legend: { show: true },
        cursor: { drag: { x: false, y: false } },
        scales: { x: { time: true }, y: { range: (_u, _min, max) => [0, Math.max(1, max ?? 1)] } },
        axes: [axisStyle, { ...axisStyle, size: 56 }],
        series: [
          {},
          ...q.kinds.flatMap((k, i) => {
            const stroke = KIND_COLOURS[i % KIND_COLOURS.length]!;
            return [
              { label: `${k.kind} pending`, stroke, width: 2 },
              { label: `${k.kind} in flight`, stroke, width: 1.5, dash: [5, 4] },
            ];
          }),
        ],
      })}
    />
  );
}

export default function SummaryCharts({ samples, queue }: { samples: readonly Sample[]; queue: readonly QueueSample[] }) {
  return (
    <div className="charts">
      <figure className="chart-card">
        <figcaption>Resources by phase, the last minutes</figcaption>
        <PhaseChart samples={samples} />
      </figure>
      <figure className="chart-card">
        <figcaption>Changes per minute (rises in each phase between samples: a lower bound)</figcaption>
        <ActivityChart samples={samples} />
      </figure>
      <figure className="chart-card">
        <figcaption>Work queue by kind, sampled every 5 s (an estimate from planner statistics)</figcaption>
        <QueueChart samples={queue} />
      </figure>
    </div>
  );
}
