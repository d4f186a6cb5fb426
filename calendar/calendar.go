package calendar

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Window is a recurring allow window: it opens at every firing of Schedule (five-field cron, or a
// descriptor such as @daily, read in TimeZone) and stays open for Duration.
type Window struct {
	Schedule string
	Duration time.Duration
	// TimeZone is an IANA time zone name; "" is UTC.
	TimeZone string
}

// Exclusion is a named range of time [Start, End) during which the calendar is closed.
type Exclusion struct {
	Name       string
	Start, End time.Time
}

// Reasons a State gives.
const (
	// ReasonNoWindows: no window is declared and no exclusion covers the time: open.
	ReasonNoWindows = "NoWindows"
	// ReasonInWindow: inside an allow window and no exclusion.
	ReasonInWindow = "InWindow"
	// ReasonOutsideWindows: outside every allow window.
	ReasonOutsideWindows = "OutsideWindows"
	// ReasonExcluded: inside an exclusion.
	ReasonExcluded = "Excluded"
)

// Horizon bounds how far ahead NextOpen and NextClose are looked for: beyond it they are zero (the
// calendar stays as it is for longer than a year, e.g. a schedule that fires on February 30th).
const Horizon = 366 * 24 * time.Hour

// maxSteps bounds the transitions walked to find NextOpen and NextClose (a window every minute
// for a year would otherwise be half a million steps).
const maxSteps = 20000

// ParseSchedule parses schedule read in the IANA time zone zone ("" is UTC) as the CronJob
// controller does. A schedule may not name its own zone (TZ= or CRON_TZ=), nor be an @every
// interval (it has no fixed start time).
func ParseSchedule(schedule, zone string) (cron.Schedule, error) {
	if strings.Contains(schedule, "TZ") {
		return nil, fmt.Errorf("must not name a time zone (CRON_TZ or TZ): set timeZone")
	}
	if strings.HasPrefix(strings.TrimSpace(schedule), "@every") {
		return nil, fmt.Errorf("must name the times a window starts (five fields or @daily, @weekly...), not an interval (@every)")
	}
	if _, err := LoadZone(zone); err != nil {
		return nil, err
	}
	spec := schedule
	if zone != "" {
		spec = "CRON_TZ=" + zone + " " + schedule
	}
	s, err := cron.ParseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("must be a cron schedule, five fields (minute hour day-of-month month day-of-week, e.g. \"0 8 * * 2\") or a descriptor (@daily): %w", err)
	}
	return s, nil
}

// LoadZone loads the IANA time zone name ("" and "UTC" are UTC). "Local" is refused: it is the
// operator's machine's, not the facility's.
func LoadZone(name string) (*time.Location, error) {
	if name == "" {
		return time.UTC, nil
	}
	if name == "Local" {
		return nil, fmt.Errorf("unknown time zone %q: name an IANA time zone, e.g. America/New_York", name)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q: name an IANA time zone, e.g. America/New_York", name)
	}
	return loc, nil
}

// Calendar is a parsed set of windows and exclusions.
type Calendar struct {
	windows    []window
	exclusions []Exclusion
}

type window struct {
	Window
	sched cron.Schedule
}

// New parses windows and exclusions. Errors name the window or exclusion by index.
func New(windows []Window, exclusions []Exclusion) (*Calendar, error) {
	c := &Calendar{exclusions: exclusions}
	for i, w := range windows {
		if _, err := LoadZone(w.TimeZone); err != nil {
			return nil, fmt.Errorf("windows[%d].timeZone: %w", i, err)
		}
		s, err := ParseSchedule(w.Schedule, w.TimeZone)
		if err != nil {
			return nil, fmt.Errorf("windows[%d].schedule: %w", i, err)
		}
		if w.Duration <= 0 {
			return nil, fmt.Errorf("windows[%d].duration: must be positive", i)
		}
		c.windows = append(c.windows, window{Window: w, sched: s})
	}
	for i, e := range exclusions {
		if !e.End.After(e.Start) {
			return nil, fmt.Errorf("exclusions[%d]: end must be after start", i)
		}
	}
	return c, nil
}

// State is what the calendar says at a time.
type State struct {
	// Open: disruptive changes may start.
	Open bool
	// Reason is one of the Reason constants; Message says it in words, naming the window or
	// exclusion.
	Reason, Message string
	// NextOpen, when closed, is when the calendar next opens (zero: not within Horizon).
	NextOpen time.Time
	// NextClose, when open, is when it next closes (zero: not within Horizon, e.g. no windows and
	// no exclusion ahead).
	NextClose time.Time
}

// At says whether the calendar is open at now, and when it next opens or closes.
func (c *Calendar) At(now time.Time) State {
	if ex, ok := c.excludedAt(now); ok {
		s := State{Reason: ReasonExcluded, NextOpen: c.nextOpen(now)}
		s.Message = fmt.Sprintf("inside exclusion %s (%s to %s)", c.exclusions[ex].Name,
			c.exclusions[ex].Start.Format(time.RFC3339), c.exclusions[ex].End.Format(time.RFC3339))
		return s
	}
	if len(c.windows) == 0 {
		return State{Open: true, Reason: ReasonNoWindows, Message: "no maintenance window is declared: always open outside the exclusions",
			NextClose: c.nextClose(now)}
	}
	if w, ok := c.windowAt(now); ok {
		return State{Open: true, Reason: ReasonInWindow, Message: "inside window " + c.describe(w), NextClose: c.nextClose(now)}
	}
	return State{Reason: ReasonOutsideWindows, Message: "outside every maintenance window", NextOpen: c.nextOpen(now)}
}

// describe names window i: windows[i] (schedule, duration, zone).
func (c *Calendar) describe(i int) string {
	w := c.windows[i]
	zone := w.TimeZone
	if zone == "" {
		zone = "UTC"
	}
	return fmt.Sprintf("windows[%d] (%q for %s, %s)", i, w.Schedule, w.Duration, zone)
}

// excludedAt returns the index of an exclusion covering t.
func (c *Calendar) excludedAt(t time.Time) (int, bool) {
	for i, e := range c.exclusions {
		if !t.Before(e.Start) && t.Before(e.End) {
			return i, true
		}
	}
	return -1, false
}

// start is the earliest firing of w in (t-duration, t] (the oldest start of w still open at t), or
// zero.
func (w window) start(t time.Time) time.Time {
	s := w.sched.Next(t.Add(-w.Duration))
	if s.IsZero() || s.After(t) {
		return time.Time{}
	}
	return s
}

// windowAt returns the index of a window open at t.
func (c *Calendar) windowAt(t time.Time) (int, bool) {
	for i, w := range c.windows {
		if !w.start(t).IsZero() {
			return i, true
		}
	}
	return -1, false
}

// coveredUntil is the end of the union of windows open at t, starting from t (zero: none open).
func (c *Calendar) coveredUntil(t time.Time) time.Time {
	var end time.Time
	for _, w := range c.windows {
		// The latest firing still open at t ends last.
		s := w.start(t)
		for n := 0; !s.IsZero() && n < maxSteps; n++ {
			if e := s.Add(w.Duration); e.After(end) {
				end = e
			}
			next := w.sched.Next(s)
			if next.IsZero() || next.After(t) {
				break
			}
			s = next
		}
	}
	return end
}

// nextOpen is the earliest time at or after now at which the calendar is open, zero when none
// within Horizon.
func (c *Calendar) nextOpen(now time.Time) time.Time {
	limit := now.Add(Horizon)
	t := now
	for n := 0; n < maxSteps && !t.After(limit); n++ {
		if _, ok := c.excludedAt(t); ok {
			// Nothing opens before the latest end of the exclusions covering t.
			end := t
			for _, e := range c.exclusions {
				if !t.Before(e.Start) && t.Before(e.End) && e.End.After(end) {
					end = e.End
				}
			}
			t = end
			continue
		}
		if len(c.windows) == 0 {
			return t
		}
		if _, ok := c.windowAt(t); ok {
			return t
		}
		var next time.Time
		for _, w := range c.windows {
			if s := w.sched.Next(t); !s.IsZero() && (next.IsZero() || s.Before(next)) {
				next = s
			}
		}
		if next.IsZero() {
			return time.Time{}
		}
		t = next
	}
	return time.Time{}
}

// nextClose is the earliest time after now at which the calendar, open at now, is closed: the end
// of the union of windows open from now on, or an exclusion's start before it; zero when none
// within Horizon.
func (c *Calendar) nextClose(now time.Time) time.Time {
	limit := now.Add(Horizon)
	var excl time.Time
	for _, e := range c.exclusions {
		if e.Start.After(now) && (excl.IsZero() || e.Start.Before(excl)) {
			excl = e.Start
		}
	}
	if len(c.windows) == 0 {
		return excl
	}
	t, ended := now, false
	for n := 0; n < maxSteps && !ended; n++ {
		end := c.coveredUntil(t)
		if end.IsZero() || !end.After(t) {
			ended = true // the union ends at t
			break
		}
		t = end
		if t.After(limit) || (!excl.IsZero() && !excl.After(t)) {
			ended = true
		}
	}
	if !ended || t.After(limit) {
		// Open for longer than maxSteps windows: as far as can be told, it does not close.
		t = time.Time{}
	}
	if !excl.IsZero() && (t.IsZero() || excl.Before(t)) {
		return excl
	}
	return t
}
