package applier

// Forget drops what the applier remembers of an object, e.g. after the operator deleted it.
func (a *Applier) Forget(key Key) { a.forget(key) }

// Deleted tells the applier that the cache saw the object deleted, by whoever: its next Apply sends
// the intent again even if the cache never showed the object after the applier created it.
func (a *Applier) Deleted(key Key) { a.forget(key) }

// ForgetGroup drops what the applier remembers of the objects applied for the owner g (see Group).
func (a *Applier) ForgetGroup(g string) {
	a.ForgetWhere(func(_ Key, group string) bool { return group == g })
}

// ForgetWhere drops what the applier remembers of every object for which drop returns true; used
// when an owner goes, so that records do not outlive their objects.
func (a *Applier) ForgetWhere(drop func(k Key, group string) bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for k, r := range a.records {
		if drop(k, r.group) {
			delete(a.records, k)
		}
	}
	for k, r := range a.status {
		if drop(k, r.group) {
			delete(a.status, k)
		}
	}
}

// Len returns how many objects the applier remembers (objects and statuses).
func (a *Applier) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.records) + len(a.status)
}

func (a *Applier) forget(key Key) {
	a.mu.Lock()
	delete(a.records, key)
	delete(a.status, key)
	a.mu.Unlock()
}
