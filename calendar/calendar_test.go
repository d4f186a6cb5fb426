package calendar

import (
	"testing"
	"time"

	. "github.com/onsi/gomega"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

func TestAt(t *testing.T) {
	daily8 := Window{Schedule: "0 8 * * *", Duration: 8 * time.Hour}
	cases := []struct {
		name       string
		windows    []Window
		exclusions []Exclusion
		now        string
		open       bool
		reason     string
		nextOpen   string // "" : zero
		nextClose  string
	}{
		{name: "no windows, no exclusions: always open", now: "2026-12-07T06:00:00Z", open: true, reason: ReasonNoWindows},
		{name: "no windows, an exclusion ahead: open until it starts",
			exclusions: []Exclusion{{Name: "run-1", Start: at("2026-12-10T00:00:00Z"), End: at("2026-12-20T00:00:00Z")}},
			now:        "2026-12-07T06:00:00Z", open: true, reason: ReasonNoWindows, nextClose: "2026-12-10T00:00:00Z"},
		{name: "no windows, inside an exclusion: opens at its end",
			exclusions: []Exclusion{{Name: "run-1", Start: at("2026-12-10T00:00:00Z"), End: at("2026-12-20T00:00:00Z")}},
			now:        "2026-12-12T06:00:00Z", reason: ReasonExcluded, nextOpen: "2026-12-20T00:00:00Z"},
		{name: "weekly window in New York, inside",
			windows: []Window{{Schedule: "0 8 * * 2", Duration: 4 * time.Hour, TimeZone: "America/New_York"}},
			now:     "2026-12-08T14:00:00Z", open: true, reason: ReasonInWindow, nextClose: "2026-12-08T17:00:00Z"},
		{name: "weekly window in New York, after it: next Tuesday 08:00 EST",
			windows: []Window{{Schedule: "0 8 * * 2", Duration: 4 * time.Hour, TimeZone: "America/New_York"}},
			now:     "2026-12-08T17:00:00Z", reason: ReasonOutsideWindows, nextOpen: "2026-12-15T13:00:00Z"},
		{name: "New York spring forward: 02:30 does not exist on March 8th, the window starts March 9th",
			windows: []Window{{Schedule: "30 2 * * *", Duration: time.Hour, TimeZone: "America/New_York"}},
			now:     "2026-03-08T07:00:00Z", reason: ReasonOutsideWindows, nextOpen: "2026-03-09T06:30:00Z"},
		{name: "New York spring forward: a window from 01:00 EST lasts 3 hours of real time (to 05:00 EDT)",
			windows: []Window{{Schedule: "0 1 * * *", Duration: 3 * time.Hour, TimeZone: "America/New_York"}},
			now:     "2026-03-08T08:30:00Z", open: true, reason: ReasonInWindow, nextClose: "2026-03-08T09:00:00Z"},
		{name: "New York fall back: the window starts at the first 01:30 (EDT)",
			windows: []Window{{Schedule: "30 1 * * *", Duration: 30 * time.Minute, TimeZone: "America/New_York"}},
			now:     "2026-11-01T05:00:00Z", reason: ReasonOutsideWindows, nextOpen: "2026-11-01T05:30:00Z"},
		{name: "London spring forward: 01:30 does not exist on March 29th",
			windows: []Window{{Schedule: "30 1 * * *", Duration: 30 * time.Minute, TimeZone: "Europe/London"}},
			now:     "2026-03-29T00:45:00Z", reason: ReasonOutsideWindows, nextOpen: "2026-03-30T00:30:00Z"},
		{name: "London fall back: 01:30 happens twice, the window opens at each (as a CronJob fires)",
			windows: []Window{{Schedule: "30 1 * * *", Duration: 30 * time.Minute, TimeZone: "Europe/London"}},
			now:     "2026-10-25T01:45:00Z", open: true, reason: ReasonInWindow, nextClose: "2026-10-25T02:00:00Z"},
		{name: "London fall back: between the two 01:30s",
			windows: []Window{{Schedule: "30 1 * * *", Duration: 30 * time.Minute, TimeZone: "Europe/London"}},
			now:     "2026-10-25T01:10:00Z", reason: ReasonOutsideWindows, nextOpen: "2026-10-25T01:30:00Z"},
		{name: "exclusion inside a window: open before it, closing at its start",
			windows:    []Window{daily8},
			exclusions: []Exclusion{{Name: "beam", Start: at("2026-12-07T10:00:00Z"), End: at("2026-12-07T12:00:00Z")}},
			now:        "2026-12-07T09:00:00Z", open: true, reason: ReasonInWindow, nextClose: "2026-12-07T10:00:00Z"},
		{name: "exclusion inside a window: closed in it, opening at its end",
			windows:    []Window{daily8},
			exclusions: []Exclusion{{Name: "beam", Start: at("2026-12-07T10:00:00Z"), End: at("2026-12-07T12:00:00Z")}},
			now:        "2026-12-07T11:00:00Z", reason: ReasonExcluded, nextOpen: "2026-12-07T12:00:00Z"},
		{name: "exclusion inside a window: open after it, to the window's end",
			windows:    []Window{daily8},
			exclusions: []Exclusion{{Name: "beam", Start: at("2026-12-07T10:00:00Z"), End: at("2026-12-07T12:00:00Z")}},
			now:        "2026-12-07T12:30:00Z", open: true, reason: ReasonInWindow, nextClose: "2026-12-07T16:00:00Z"},
		{name: "exclusion over the next windows: opens inside the first window after it",
			windows:    []Window{{Schedule: "0 8 * * *", Duration: 2 * time.Hour}},
			exclusions: []Exclusion{{Name: "run", Start: at("2026-12-07T07:00:00Z"), End: at("2026-12-09T09:00:00Z")}},
			now:        "2026-12-07T07:30:00Z", reason: ReasonExcluded, nextOpen: "2026-12-09T09:00:00Z"},
		{name: "exclusion over a window's end: opens at the next window",
			windows:    []Window{{Schedule: "0 8 * * *", Duration: 2 * time.Hour}},
			exclusions: []Exclusion{{Name: "run", Start: at("2026-12-07T09:00:00Z"), End: at("2026-12-07T11:00:00Z")}},
			now:        "2026-12-07T09:30:00Z", reason: ReasonExcluded, nextOpen: "2026-12-08T08:00:00Z"},
		{name: "overlapping windows: open until the later one ends",
			windows: []Window{{Schedule: "0 8 * * *", Duration: 4 * time.Hour}, {Schedule: "0 10 * * *", Duration: 4 * time.Hour}},
			now:     "2026-12-07T09:00:00Z", open: true, reason: ReasonInWindow, nextClose: "2026-12-07T14:00:00Z"},
		{name: "overlapping windows: closed after both",
			windows: []Window{{Schedule: "0 8 * * *", Duration: 4 * time.Hour}, {Schedule: "0 10 * * *", Duration: 4 * time.Hour}},
			now:     "2026-12-07T15:00:00Z", reason: ReasonOutsideWindows, nextOpen: "2026-12-08T08:00:00Z"},
		{name: "a window longer than its period is always open",
			windows: []Window{{Schedule: "0 * * * *", Duration: 2 * time.Hour}},
			now:     "2026-12-07T15:00:00Z", open: true, reason: ReasonInWindow},
		{name: "a window every minute for two minutes never closes",
			windows: []Window{{Schedule: "* * * * *", Duration: 2 * time.Minute}},
			now:     "2026-12-07T15:00:30Z", open: true, reason: ReasonInWindow},
		{name: "a window's end is closed",
			windows: []Window{{Schedule: "0 8 * * *", Duration: 2 * time.Hour}},
			now:     "2026-12-07T10:00:00Z", reason: ReasonOutsideWindows, nextOpen: "2026-12-08T08:00:00Z"},
		{name: "a window's start is open",
			windows: []Window{{Schedule: "0 8 * * *", Duration: 2 * time.Hour}},
			now:     "2026-12-07T08:00:00Z", open: true, reason: ReasonInWindow, nextClose: "2026-12-07T10:00:00Z"},
		{name: "a schedule that never fires never opens",
			windows: []Window{{Schedule: "0 8 30 2 *", Duration: 2 * time.Hour}},
			now:     "2026-12-07T08:00:00Z", reason: ReasonOutsideWindows},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			c, err := New(tc.windows, tc.exclusions)
			g.Expect(err).NotTo(HaveOccurred())
			s := c.At(at(tc.now))
			g.Expect(s.Open).To(Equal(tc.open), s.Message)
			g.Expect(s.Reason).To(Equal(tc.reason))
			g.Expect(s.Message).NotTo(BeEmpty())
			want := func(v string) time.Time {
				if v == "" {
					return time.Time{}
				}
				return at(v)
			}
			g.Expect(s.NextOpen.UTC()).To(Equal(want(tc.nextOpen).UTC()), "nextOpen")
			g.Expect(s.NextClose.UTC()).To(Equal(want(tc.nextClose).UTC()), "nextClose")
		})
	}
}

func TestNewRefuses(t *testing.T) {
	cases := []struct {
		name       string
		windows    []Window
		exclusions []Exclusion
		err        string
	}{
		{"six fields", []Window{{Schedule: "0 0 8 * * 2", Duration: time.Hour}}, nil, "windows[0].schedule: must be a cron schedule"},
		{"not cron", []Window{{Schedule: "tuesdays", Duration: time.Hour}}, nil, "windows[0].schedule: must be a cron schedule"},
		{"zone in the schedule", []Window{{Schedule: "CRON_TZ=UTC 0 8 * * 2", Duration: time.Hour}}, nil, "must not name a time zone"},
		{"an interval", []Window{{Schedule: "@every 1h", Duration: time.Hour}}, nil, "not an interval"},
		{"unknown zone", []Window{{Schedule: "0 8 * * 2", Duration: time.Hour, TimeZone: "Mars/Olympus"}}, nil, `windows[0].timeZone: unknown time zone "Mars/Olympus"`},
		{"Local", []Window{{Schedule: "0 8 * * 2", Duration: time.Hour, TimeZone: "Local"}}, nil, `unknown time zone "Local"`},
		{"no duration", []Window{{Schedule: "0 8 * * 2"}}, nil, "windows[0].duration: must be positive"},
		{"end before start", nil, []Exclusion{{Name: "x", Start: at("2026-12-07T10:00:00Z"), End: at("2026-12-07T09:00:00Z")}}, "exclusions[0]: end must be after start"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			_, err := New(tc.windows, tc.exclusions)
			g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
		})
	}
}

func TestDescriptorsAndZones(t *testing.T) {
	g := NewWithT(t)
	for _, s := range []string{"@daily", "@weekly", "@hourly", "0 8 * * TUE", "*/15 6-8 * * 1-5"} {
		_, err := ParseSchedule(s, "Europe/London")
		g.Expect(err).NotTo(HaveOccurred(), s)
	}
	_, err := ParseSchedule("0 8 * * *", "")
	g.Expect(err).NotTo(HaveOccurred())
}
