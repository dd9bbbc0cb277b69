package broker

// AwaitedTaskIDs lists the task ids of the stages waiting for a completion
// (what an attacker who reads the readable fields a task id is built from
// could compute).
func (b *Broker) AwaitedTaskIDs() []string {
	b.completions.mu.Lock()
	defer b.completions.mu.Unlock()
	out := make([]string, 0, len(b.completions.waiters))
	for id := range b.completions.waiters {
		out = append(out, id)
	}
	return out
}
