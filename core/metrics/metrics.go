// Package metrics holds the Prometheus collectors every duty reports into,
// served at /metrics. One registry per process (no global state, so tests
// can build as many as they like).
package metrics

import (
	"context"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the process's collectors.
type Metrics struct {
	Registry *prometheus.Registry

	Claims       *prometheus.CounterVec   // tasks claimed, by kind and task type
	Completions  *prometheus.CounterVec   // stage completions, by kind, stage and result
	TaskDuration *prometheus.HistogramVec // dispatch → completion, by kind and stage
	DrainBatches prometheus.Counter       // drain_outbox_batch calls that applied rows
	DrainRows    prometheus.Counter       // outbox rows applied
	DrainLatency prometheus.Histogram     // one drain batch
	Wakes        *prometheus.CounterVec   // LISTEN wakes received, by channel
	Workers      prometheus.Gauge         // workers connected to this broker
	OutboxLag    prometheus.Gauge         // the oldest outbox result's wait, as the dispatcher last read it
}

// New builds the collectors on a fresh registry, with Go and process metrics.
func New() *Metrics {
	r := prometheus.NewRegistry()
	m := &Metrics{
		Registry: r,
		Claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Name: "tasks_claimed_total", Help: "Tasks claimed from work_queue.",
		}, []string{"kind", "task_type"}),
		Completions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Name: "stage_completions_total", Help: "Stage completions received from workers.",
		}, []string{"kind", "stage", "result"}),
		TaskDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "converge", Name: "stage_duration_seconds", Help: "Dispatch to completion of one stage.",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
		}, []string{"kind", "stage"}),
		DrainBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "converge", Name: "drain_batches_total", Help: "Outbox drain batches that applied at least one row.",
		}),
		DrainRows: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "converge", Name: "drain_rows_total", Help: "Outbox rows applied to resources.",
		}),
		DrainLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "converge", Name: "drain_batch_seconds", Help: "Latency of one drain_outbox_batch call.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
		Wakes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "converge", Name: "wakes_total", Help: "LISTEN wakes received.",
		}, []string{"channel"}),
		Workers: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "converge", Name: "workers_connected", Help: "Workers connected to this broker.",
		}),
		OutboxLag: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "converge", Name: "outbox_lag_seconds",
			Help: "How long the oldest result in this broker's shards had waited for the drain at its dispatcher's last look: at most ten times a second while it claims, and on each idle poll until it sees the outbox empty (it claims only rollups while this exceeds its bound).",
		}),
	}
	r.MustRegister(m.Claims, m.Completions, m.TaskDuration, m.DrainBatches, m.DrainRows, m.DrainLatency, m.Wakes, m.Workers, m.OutboxLag,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// QueueDepthFunc reads the work_queue depth by kind and state (pending or
// leased); store.Store.QueueDepth estimates it from planner statistics.
type QueueDepthFunc func(ctx context.Context) (map[[2]string]float64, error)

// queueDepthHelp states the gauge's precision: it is an estimate that costs
// a catalog read, never a scan of the queue.
const queueDepthHelp = "Estimated work_queue rows by kind and state (pending, leased), from planner statistics " +
	"(no queue scan): each partition's partial-index row counts split by its sampled kind frequencies, as fresh " +
	"as the partition's last autovacuum or analyze; rows no frequency covers are kind=\"(other)\". " +
	"A trend and order-of-magnitude signal, not an exact count; absent while the read fails."

// RegisterQueueDepth adds a converge_queue_depth gauge read through f at
// scrape time, cached for ttl so frequent scrapes cost one read per ttl. A
// read that fails leaves the gauge without series until one succeeds.
func (m *Metrics) RegisterQueueDepth(f QueueDepthFunc, ttl time.Duration) {
	m.Registry.MustRegister(&queueDepth{f: f, ttl: ttl, desc: prometheus.NewDesc("converge_queue_depth",
		queueDepthHelp, []string{"kind", "state"}, nil)})
}

type queueDepth struct {
	f    QueueDepthFunc
	ttl  time.Duration
	desc *prometheus.Desc

	mu   sync.Mutex
	at   time.Time
	last map[[2]string]float64
}

func (q *queueDepth) Describe(ch chan<- *prometheus.Desc) { ch <- q.desc }

func (q *queueDepth) Collect(ch chan<- prometheus.Metric) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if time.Since(q.at) > q.ttl {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		v, err := q.f(ctx)
		cancel()
		if err != nil {
			// Unknown, not the last value as if it were current; retried
			// after ttl like a success, so an outage costs one read per ttl.
			v = nil
		}
		q.last, q.at = v, time.Now()
	}
	for k, v := range q.last {
		ch <- prometheus.MustNewConstMetric(q.desc, prometheus.GaugeValue, v, k[0], k[1])
	}
}
