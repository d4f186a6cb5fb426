package childset

import (
	"context"
	"sort"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/bluesky/tiled-operator/controllers/applier"
)

// Set is the children one owner wants, in the order they are applied. It hands the engine each
// child's prepared intent (what the applier needs to decide whether an apply must be sent), the
// object itself only when it must be sent, and the child as the cache holds it now.
type Set interface {
	// Len is the number of children.
	Len() int
	// Prepared is the applier's prepared form of child i.
	Prepared(i int) applier.Prepared
	// Build returns child i's apply configuration, with the content Prepared(i) was prepared from;
	// it is called only when the child must be sent, and may be called from several goroutines.
	Build(i int) (runtime.ApplyConfiguration, error)
	// Current returns child i as the cache holds it, or nil when the cache has no such object.
	Current(ctx context.Context, i int) (client.Object, error)
}

// Options are the strategy of one Apply: what differs between the owners that use the engine.
type Options struct {
	// Group files the applier's records under the owner ("namespace/name", applier.Group), so
	// that they are forgotten together when the owner goes.
	Group string
	// Workers is how many children are applied at once; 0 or 1 applies them one after another.
	// With several, children are handed out in order and no new one is started after an error.
	Workers int
	// RetryConflict tries an apply the API server answers with a conflict once more (it can be a
	// race with another writer) before calling it a refusal.
	RetryConflict bool
	// ContinueOnRefusal records a refused child (Record.Refused) and goes on with the others;
	// otherwise the first refusal ends the apply with a *RefusedError.
	ContinueOnRefusal bool
	// Skip, when not nil, leaves out the children it returns true for (a rollout holding them).
	Skip func(i int) bool
	// Record keeps, by key, the generation of every child applied and the children read from the
	// cache and not sent (Record.Applied, Record.Unsent), for a caller that reads its status from
	// them; without it only Record.Refused and Record.Recheck are kept.
	Record bool
	// AfterApply, when not nil, runs after each child is applied (or found applied), with the child
	// as the cache showed it before (nil when absent); an error ends the apply.
	AfterApply func(ctx context.Context, current client.Object) error
}

// Record is what one Apply did.
type Record struct {
	// Applied is the generation each child has after the operator's last apply of its intent, by
	// key (0 for kinds without one): a cache showing an older one has not caught up (Options.Record).
	Applied map[applier.Key]int64
	// Unsent are the children read from the cache and not sent, as the cache showed them, by key: a
	// moment old, so reading them again in the same reconcile would only copy them once more
	// (Options.Record).
	Unsent map[applier.Key]client.Object
	// Recheck, when not zero, is how soon to look again for a child just created that the cache
	// does not show yet, in case it was deleted before it ever did.
	Recheck time.Duration
	// Refused are the children the API server refused, in the set's order (ContinueOnRefusal).
	Refused []Refused
}

// Refused is a child the API server refused.
type Refused struct {
	// Index is the child's place in the set.
	Index int
	// Key names the child.
	Key applier.Key
	// Reason is the refusal's class (Refusal).
	Reason string
	// Err is the API server's answer.
	Err error
}

// add records the applier's result for a child, read from the cache as current.
func (r *Record) add(res applier.Result, current client.Object) {
	if r.Applied != nil {
		r.Applied[res.Key] = res.Generation
		if !res.Sent && current != nil {
			r.Unsent[res.Key] = current
		}
	}
	if res.Recheck > 0 && (r.Recheck == 0 || res.Recheck < r.Recheck) {
		r.Recheck = res.Recheck
	}
}

// Apply applies the children of set in order through a, as o says, and records what it did. An
// error other than a refusal recorded under ContinueOnRefusal ends it: the children applied before
// stand, the rest are left as they were, and the error (the build's own, when building a child
// failed) is returned with no record.
func Apply(ctx context.Context, a *applier.Applier, set Set, o Options) (*Record, error) {
	rec := &Record{}
	if o.Record {
		rec.Applied, rec.Unsent = map[applier.Key]int64{}, map[applier.Key]client.Object{}
	}
	var mu sync.Mutex // guards rec while children are applied concurrently
	group := applier.Group(o.Group)
	one := func(i int) error {
		current, err := set.Current(ctx, i)
		if err != nil {
			return err
		}
		p, build := set.Prepared(i), func() (runtime.ApplyConfiguration, error) { return set.Build(i) }
		res, err := a.ApplyPrepared(ctx, p, build, current, group)
		if o.RetryConflict && apierrors.IsConflict(err) {
			res, err = a.ApplyPrepared(ctx, p, build, current, group)
		}
		if reason := Refusal(err); reason != "" {
			if !o.ContinueOnRefusal {
				return &RefusedError{Key: res.Key, Reason: reason, Err: err}
			}
			mu.Lock()
			rec.Refused = append(rec.Refused, Refused{Index: i, Key: res.Key, Reason: reason, Err: err})
			mu.Unlock()
			return nil
		}
		if err != nil {
			return err
		}
		mu.Lock()
		rec.add(res, current)
		mu.Unlock()
		if o.AfterApply != nil {
			return o.AfterApply(ctx, current)
		}
		return nil
	}
	var err error
	if o.Workers > 1 {
		err = concurrently(set.Len(), o.Workers, o.Skip, one)
	} else {
		err = inOrder(set.Len(), o.Skip, one)
	}
	if err != nil {
		return nil, err
	}
	sort.Slice(rec.Refused, func(i, j int) bool { return rec.Refused[i].Index < rec.Refused[j].Index })
	return rec, nil
}

// inOrder runs do on 0..n-1 (those skip leaves in), one after another, until one fails.
func inOrder(n int, skip func(int) bool, do func(int) error) error {
	for i := range n {
		if skip != nil && skip(i) {
			continue
		}
		if err := do(i); err != nil {
			return err
		}
	}
	return nil
}

// concurrently runs do on 0..n-1 (those skip leaves in) with up to workers at once, handed out in
// order; once one fails, no other is started, those under way finish, and the first error is
// returned.
func concurrently(n, workers int, skip func(int) bool, do func(int) error) error {
	var (
		mu       sync.Mutex
		firstErr error
		wg       sync.WaitGroup
	)
	work := make(chan int)
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				if err := do(i); err != nil {
					mu.Lock()
					if firstErr == nil {
						firstErr = err
					}
					mu.Unlock()
				}
			}
		}()
	}
	for i := range n {
		if skip != nil && skip(i) {
			continue
		}
		mu.Lock()
		failed := firstErr != nil
		mu.Unlock()
		if failed {
			break // the applies already sent stand
		}
		work <- i
	}
	close(work)
	wg.Wait()
	return firstErr
}
