// Package calendar says whether a facility's maintenance calendar is open at a given time, and when
// it next opens and closes. The calendar is a set of recurring allow windows — a five-field cron
// schedule (as a CronJob's), a duration, an IANA time zone — and of exclusions, named ranges of
// time (a beam run) during which nothing disruptive happens whatever the windows say.
//
// Open means: inside at least one allow window (or no window declared at all) and outside every
// exclusion. A window that starts at t is open over [t, t+duration); an exclusion over [start, end).
// Windows may overlap; their union is what is open.
//
// Schedules are parsed and evaluated as the Kubernetes CronJob controller does (robfig/cron's
// standard parser, the schedule's times read in the window's time zone): across a daylight saving
// change, a start time that does not exist that day (02:30 when clocks go from 02:00 to 03:00) is
// skipped, and one that exists twice (01:30 when clocks go back) starts the window at each of its
// occurrences, an hour apart (robfig/cron's behaviour, which CronJobs share); a duration is elapsed
// time, so a four-hour window that spans the change lasts four hours of real time, whatever the wall
// clock says. Choose start times outside 01:00-03:00 local time to be clear of both.
//
// Everything here is pure: no clock but the one passed in. The webhooks validate with Parse, the
// instance controller evaluates with Calendar.At and requeues at the returned NextOpen.
package calendar
