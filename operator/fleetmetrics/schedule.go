package fleetmetrics

import (
	"sync"
	"time"

	"github.com/robfig/cron/v3"
)

// Horizon is how far ahead BackupInterval looks at a schedule's firings: a week and a day, so that
// a weekly schedule shows one whole interval and a daily one every day of the week (a schedule
// skipping the weekend shows the weekend's gap).
const Horizon = 8 * 24 * time.Hour

// maxFirings bounds the firings BackupInterval walks (every minute for 8 days is 11,520).
const maxFirings = 20000

// BackupInterval is the longest time between two consecutive firings of a backup schedule (cron
// syntax as a CronJob's, parsed by the parser spec.backup.schedule is validated with) in the IANA
// time zone zone ("" is UTC: the kube-controller-manager's zone, which the operator cannot know,
// is UTC on most clusters), over the firings from from to Horizon after it; at least one interval
// is measured, so a monthly schedule gives a month. ok is false for a schedule that cannot be
// parsed, an unknown zone, or a schedule that fires fewer than twice.
func BackupInterval(schedule, zone string, from time.Time) (d time.Duration, ok bool) {
	sched, err := cron.ParseStandard(schedule)
	if err != nil {
		return 0, false
	}
	loc := time.UTC
	if zone != "" {
		if loc, err = time.LoadLocation(zone); err != nil {
			return 0, false
		}
	}
	t := sched.Next(from.In(loc))
	if t.IsZero() {
		return 0, false
	}
	end := from.Add(Horizon)
	for range maxFirings {
		n := sched.Next(t)
		if n.IsZero() {
			break
		}
		d = max(d, n.Sub(t))
		t = n
		if t.After(end) {
			break
		}
	}
	return d, d > 0
}

// intervalTTL is how long a computed interval is kept: intervals change only with the calendar
// (daylight saving, months).
const intervalTTL = time.Hour

// maxIntervals bounds the cache: most fleets share a handful of schedules.
const maxIntervals = 1024

// intervalCache keeps BackupInterval's answers by schedule and zone, so that a scrape of a fleet
// with one schedule computes it once an hour.
type intervalCache struct {
	now     func() time.Time
	mu      sync.Mutex
	entries map[[2]string]intervalEntry
}

type intervalEntry struct {
	d    time.Duration
	ok   bool
	when time.Time
}

func newIntervalCache(now func() time.Time) *intervalCache {
	return &intervalCache{now: now, entries: map[[2]string]intervalEntry{}}
}

func (c *intervalCache) get(schedule, zone string) (time.Duration, bool) {
	now := c.now()
	k := [2]string{schedule, zone}
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, found := c.entries[k]; found && now.Sub(e.when) < intervalTTL && !now.Before(e.when) {
		return e.d, e.ok
	}
	d, ok := BackupInterval(schedule, zone, now)
	if len(c.entries) >= maxIntervals {
		clear(c.entries)
	}
	c.entries[k] = intervalEntry{d: d, ok: ok, when: now}
	return d, ok
}
