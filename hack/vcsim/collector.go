package main

// --batch-collector: a PropertyCollector whose WaitForUpdatesEx costs one traversal per tick.
//
// vcsim's WaitForUpdatesEx (0.24 and still 0.56) wakes on a ticker (250 ms in 0.24, 20 ms in
// 0.56) and, for every object change queued since (each task created or updated, each VM
// property set), re-collects every property of every object in each filter to find objects
// that entered it: a tick with u changes costs u full collections, so provisioning n VMs
// against a filter over all VMs costs O(n^2) and dominated the simulator's CPU in the
// end-to-end benchmark (bench/e2e.py; about 70% of vcsim's samples at 1,000 VMs on 0.24).
// vCenter computes updates incrementally. This collector keeps vcsim's semantics
// (the same "enter" objects with every filtered property, "modify" change sets filtered by the
// filter's property specs, "leave" for removed objects, the 250 ms accumulation, MaxWaitSeconds
// and CancelWaitForUpdates) but collects each filter once per tick that has changes. Like vcsim,
// an object that leaves a filter's traversal without being removed is not reported, and the
// first call collects the current state before it subscribes to changes.
//
// It replaces the root PropertyCollector (vcsim gives every session a fresh instance of the
// root's type) and CreatePropertyCollector makes more of the same. Opt-in: the tests exercise
// vcsim's own collector; the benchmark uses this one.

import (
	"context"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/methods"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/soap"
	"github.com/vmware/govmomi/vim25/types"
)

// batchCollector embeds vcsim's collector for everything but the wait (RetrievePropertiesEx,
// CreateFilter, ...). It is the registry handler that queues changes while a wait loop runs.
type batchCollector struct {
	simulator.PropertyCollector

	mu       sync.Mutex
	changes  []types.ObjectUpdate
	reported map[types.ManagedObjectReference]map[types.ManagedObjectReference]struct{} // filter -> objects reported
	cancel   context.CancelFunc
	watching bool // registered as a registry handler
}

// installBatchCollector replaces the root PropertyCollector of the model's registry (call after
// the model is created, before serving).
func installBatchCollector(r *simulator.Registry) {
	si := r.Get(types.ManagedObjectReference{Type: "ServiceInstance", Value: "ServiceInstance"}).(*simulator.ServiceInstance)
	root := &batchCollector{}
	root.Self = si.Content.PropertyCollector
	r.Put(root)
}

// CreatePropertyCollector makes a session collector of this type (vcsim's makes its own type).
func (bc *batchCollector) CreatePropertyCollector(ctx *simulator.Context, c *types.CreatePropertyCollector) soap.HasFault {
	cpc := &batchCollector{}
	cpc.Self.Type = "PropertyCollector" // else the moref's type would be this Go type's name
	return &methods.CreatePropertyCollectorBody{
		Res: &types.CreatePropertyCollectorResponse{Returnval: ctx.Session.Put(cpc).Reference()},
	}
}

// DestroyPropertyCollector cancels a wait, stops queueing changes, then lets vcsim destroy the
// filters and the collector.
func (bc *batchCollector) DestroyPropertyCollector(ctx *simulator.Context, c *types.DestroyPropertyCollector) soap.HasFault {
	bc.CancelWaitForUpdates(&types.CancelWaitForUpdates{This: c.This})
	bc.mu.Lock()
	watching := bc.watching
	bc.watching = false
	bc.changes = nil
	bc.mu.Unlock()
	if watching {
		ctx.Map.RemoveHandler(bc)
	}
	return bc.PropertyCollector.DestroyPropertyCollector(ctx, c)
}

// CancelWaitForUpdates ends an outstanding WaitForUpdatesEx with RequestCanceled.
func (bc *batchCollector) CancelWaitForUpdates(r *types.CancelWaitForUpdates) soap.HasFault {
	bc.mu.Lock()
	if bc.cancel != nil {
		bc.cancel()
	}
	bc.mu.Unlock()
	return &methods.CancelWaitForUpdatesBody{Res: new(types.CancelWaitForUpdatesResponse)}
}

func (bc *batchCollector) queue(u types.ObjectUpdate) {
	bc.mu.Lock()
	if bc.watching {
		bc.changes = append(bc.changes, u)
	}
	bc.mu.Unlock()
}

// PutObject, UpdateObject and RemoveObject make the collector a simulator.RegisterObject.
func (bc *batchCollector) PutObject(_ *simulator.Context, o mo.Reference) {
	bc.queue(types.ObjectUpdate{Obj: o.Reference(), Kind: types.ObjectUpdateKindEnter})
}

func (bc *batchCollector) UpdateObject(_ *simulator.Context, o mo.Reference, changes []types.PropertyChange) {
	bc.queue(types.ObjectUpdate{Obj: o.Reference(), Kind: types.ObjectUpdateKindModify, ChangeSet: changes})
}

func (bc *batchCollector) RemoveObject(_ *simulator.Context, ref types.ManagedObjectReference) {
	bc.queue(types.ObjectUpdate{Obj: ref, Kind: types.ObjectUpdateKindLeave})
}

func (bc *batchCollector) filters(ctx *simulator.Context) map[types.ManagedObjectReference]*simulator.PropertyFilter {
	out := map[types.ManagedObjectReference]*simulator.PropertyFilter{}
	for _, ref := range bc.Filter {
		if f, ok := ctx.Session.Get(ref).(*simulator.PropertyFilter); ok {
			out[ref] = f
		}
	}
	return out
}

// enter collects filter f and returns the objects it has not reported yet, with every property.
func (bc *batchCollector) enter(ctx *simulator.Context, ref types.ManagedObjectReference, f *simulator.PropertyFilter) ([]types.ObjectUpdate, *soap.Fault) {
	res := bc.PropertyCollector.RetrievePropertiesEx(ctx, &types.RetrievePropertiesEx{SpecSet: []types.PropertyFilterSpec{f.Spec}})
	if fault := res.Fault(); fault != nil {
		return nil, fault
	}
	seen := bc.reported[ref]
	if seen == nil {
		seen = map[types.ManagedObjectReference]struct{}{}
		bc.reported[ref] = seen
	}
	var out []types.ObjectUpdate
	for _, o := range res.(*methods.RetrievePropertiesExBody).Res.Returnval.Objects {
		if _, ok := seen[o.Obj]; ok {
			continue
		}
		seen[o.Obj] = struct{}{}
		ou := types.ObjectUpdate{Obj: o.Obj, Kind: types.ObjectUpdateKindEnter}
		for _, p := range o.PropSet {
			ou.ChangeSet = append(ou.ChangeSet, types.PropertyChange{Op: types.PropertyChangeOpAssign, Name: p.Name, Val: p.Val})
		}
		out = append(out, ou)
	}
	return out, nil
}

// modified keeps the changes filter f selects (vcsim: PropertyFilter.apply): a change of a
// watched path, or of a path below a watched one, which is then reported as the watched path
// with its current value.
func (bc *batchCollector) modified(ctx *simulator.Context, f *simulator.PropertyFilter, u types.ObjectUpdate) types.ObjectUpdate {
	var kept []types.PropertyChange
	parents := map[string]bool{}
	for _, change := range u.ChangeSet {
		name, ok := watchedPath(ctx, f.Spec.PropSet, u.Obj, change.Name)
		if !ok {
			continue
		}
		if name != change.Name {
			if parents[name] {
				continue
			}
			parents[name] = true
			change.Name = name
			change.Val = bc.value(ctx, u.Obj, name)
		}
		kept = append(kept, change)
	}
	u.ChangeSet = kept
	return u
}

// watchedPath returns the path of specs that selects a change of name on obj.
func watchedPath(ctx *simulator.Context, specs []types.PropertySpec, obj types.ManagedObjectReference, name string) (string, bool) {
	for _, p := range specs {
		if p.Type != obj.Type && !embeds(ctx, obj, p.Type) {
			continue
		}
		if p.All != nil && *p.All {
			return name, true
		}
		for _, path := range p.PathSet {
			if path == name {
				return name, true
			}
			if strings.HasPrefix(name, path) {
				return path, true
			}
		}
	}
	return "", false
}

// embeds: the object's Go type embeds the spec's type (e.g. ManagedEntity in VirtualMachine).
func embeds(ctx *simulator.Context, obj types.ManagedObjectReference, typeName string) bool {
	o := ctx.Map.Get(obj)
	if o == nil {
		return false
	}
	t := reflect.TypeOf(o)
	for t.Kind() == reflect.Ptr {
		t = t.Elem()
	}
	for t.Kind() == reflect.Struct {
		if field, ok := t.FieldByName(typeName); ok && field.Anonymous {
			return true
		}
		if t.NumField() == 0 || !t.Field(0).Anonymous {
			return false
		}
		t = t.Field(0).Type // vcsim types embed the mo type first
		for t.Kind() == reflect.Ptr {
			t = t.Elem()
		}
	}
	return false
}

// value reads one property of obj (nil when gone or unset).
func (bc *batchCollector) value(ctx *simulator.Context, obj types.ManagedObjectReference, path string) types.AnyType {
	spec := types.PropertyFilterSpec{
		ObjectSet: []types.ObjectSpec{{Obj: obj}},
		PropSet:   []types.PropertySpec{{Type: obj.Type, PathSet: []string{path}}},
	}
	t := true
	spec.ReportMissingObjectsInResults = &t
	res := bc.PropertyCollector.RetrievePropertiesEx(ctx, &types.RetrievePropertiesEx{SpecSet: []types.PropertyFilterSpec{spec}})
	if res.Fault() != nil {
		return nil
	}
	for _, o := range res.(*methods.RetrievePropertiesExBody).Res.Returnval.Objects {
		for _, p := range o.PropSet {
			return p.Val
		}
	}
	return nil
}

// WaitForUpdatesEx: see the file comment. Unlike vcsim 0.56 it does not page results at
// MaxObjectUpdates (a benchmark-only collector; the tests exercise vcsim's own paging). Version "" returns every filter's current objects
// and starts queueing changes; later calls wait (250 ms ticks) until a tick yields updates,
// MaxWaitSeconds passes (nil result) or CancelWaitForUpdates is called (RequestCanceled).
func (bc *batchCollector) WaitForUpdatesEx(ctx *simulator.Context, r *types.WaitForUpdatesEx) soap.HasFault {
	wait, cancel := context.WithCancel(context.Background())
	oneUpdate := false
	if r.Options != nil && r.Options.MaxWaitSeconds != nil {
		max := *r.Options.MaxWaitSeconds
		oneUpdate = max == 0
		if max > 0 {
			cancel()
			wait, cancel = context.WithTimeout(context.Background(), time.Duration(max)*time.Second)
		}
	}
	defer cancel()
	bc.mu.Lock()
	bc.cancel = cancel
	if bc.reported == nil {
		bc.reported = map[types.ManagedObjectReference]map[types.ManagedObjectReference]struct{}{}
	}
	bc.mu.Unlock()

	body := &methods.WaitForUpdatesExBody{}
	set := &types.UpdateSet{Version: r.Version}
	body.Res = &types.WaitForUpdatesExResponse{Returnval: set}
	fail := func(fault *soap.Fault) soap.HasFault {
		return &methods.WaitForUpdatesExBody{Fault_: fault}
	}

	if r.Version == "" {
		for ref, f := range bc.filters(ctx) {
			objs, fault := bc.enter(ctx, ref, f)
			if fault != nil {
				return fail(fault)
			}
			if len(objs) != 0 {
				set.FilterSet = append(set.FilterSet, types.PropertyFilterUpdate{Filter: ref, ObjectSet: objs})
			}
		}
		set.Version = "-"
		bc.mu.Lock()
		if !bc.watching {
			bc.watching = true
			ctx.Map.AddHandler(bc)
		}
		bc.mu.Unlock()
		return body
	}

	ticker := time.NewTicker(250 * time.Millisecond) // let changes accumulate (one collection per tick)
	defer ticker.Stop()
	for {
		select {
		case <-wait.Done():
			if wait.Err() == context.Canceled {
				return fail(simulator.Fault("", new(types.RequestCanceled)))
			}
			body.Res.Returnval = nil // MaxWaitSeconds passed
			return body
		case <-ticker.C:
			bc.mu.Lock()
			changes := bc.changes
			bc.changes = nil
			bc.mu.Unlock()
			if len(changes) == 0 {
				if oneUpdate {
					body.Res.Returnval = nil
					return body
				}
				continue
			}
			// Any create or update may change what a traversal reaches: collect once.
			collect := false
			for _, u := range changes {
				if u.Kind != types.ObjectUpdateKindLeave {
					collect = true
					break
				}
			}
			for ref, f := range bc.filters(ctx) {
				fu := types.PropertyFilterUpdate{Filter: ref}
				seen := bc.reported[ref]
				before := map[types.ManagedObjectReference]struct{}{}
				for obj := range seen {
					before[obj] = struct{}{}
				}
				if collect {
					objs, fault := bc.enter(ctx, ref, f)
					if fault != nil {
						return fail(fault)
					}
					fu.ObjectSet = append(fu.ObjectSet, objs...)
					seen = bc.reported[ref]
				}
				for _, u := range changes {
					switch u.Kind {
					case types.ObjectUpdateKindModify:
						// An object that entered in this tick was reported with every property.
						if _, ok := before[u.Obj]; ok {
							if m := bc.modified(ctx, f, u); len(m.ChangeSet) != 0 {
								fu.ObjectSet = append(fu.ObjectSet, m)
							}
						}
					case types.ObjectUpdateKindLeave:
						if _, ok := seen[u.Obj]; ok {
							delete(seen, u.Obj)
							fu.ObjectSet = append(fu.ObjectSet, u)
						}
					}
				}
				if len(fu.ObjectSet) != 0 {
					set.FilterSet = append(set.FilterSet, fu)
				}
			}
			if len(set.FilterSet) != 0 {
				return body
			}
			if oneUpdate {
				body.Res.Returnval = nil
				return body
			}
		}
	}
}
