package stack

// Watched makes s's commands run as the sandbox's activity with dir as
// its lifetime directory, as once s started a watchdog (ensureWatchdog),
// on a provider that has none.
func Watched(s *Stack, dir string) {
	s.activity.Store(&activityWrap{worker: s.Worker, dir: dir})
}
