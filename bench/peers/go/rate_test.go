// The peer for sluice's token bucket: golang.org/x/time/rate (Debian's golang-golang-x-time-dev).
// Run by bench/core_vs_go.sh, which compares it with bench/core_bench.cpp in the same run.
package peers

import (
	"testing"
	"time"

	"golang.org/x/time/rate"
)

// The same bucket as sluice's benchmark: 1,000 tokens, a million per second.
func newLimiter() *rate.Limiter { return rate.NewLimiter(rate.Limit(1e6), 1000) }

// Allow reads the clock (time.Now) for every decision.
func BenchmarkAllow(b *testing.B) {
	l := newLimiter()
	for i := 0; i < b.N; i++ {
		l.Allow()
	}
}

// AllowN with the time passed in, advancing one microsecond per decision.
func BenchmarkAllowNTimePassedIn(b *testing.B) {
	l := newLimiter()
	now := time.Now()
	for i := 0; i < b.N; i++ {
		now = now.Add(time.Microsecond)
		l.AllowN(now, 1)
	}
}
