package workerproto

// PlannedSessionEnd begins the message of the Unavailable status with which
// a broker ends a worker's WorkStream on purpose: the broker has drained and
// is shutting down, or the session reached the broker's maximum session age
// (WORKER_SESSION_MAX_AGE). The worker reconnects (to any broker, behind a
// Service) and redelivers the results it has not seen acknowledged, as after
// any lost stream; an SDK logs such an end below WARN, since nothing failed.
const PlannedSessionEnd = "session ended by the broker"
