package main

// Where vcsim 0.56 differs from vCenter in what banlieue's and CAPV's clients see, and how this
// main makes it behave like vCenter (always on; each checked by tests/vsphere/test_vcsim_harness.py).
//
// Unique VM identities. vcsim derives a new VM's BIOS UUID (config.uuid) and instance UUID
// (config.instanceUuid) from a hash of its .vmx path ("[LocalDS_0] name/name.vmx"), so two
// simulators give a VM of the same name on a datastore of the same name the same UUIDs, where
// vCenter generates random ones (a Kubernetes providerID is "vsphere://<BIOS UUID>": two
// clusters' Machines would collide). vcRequests fills in random UUIDs for CreateVM_Task and
// CloneVM_Task calls that do not ask for specific ones (vcsim honours the ConfigSpec's).
//
// Per-clone MACs. vcsim copies every device of the source into a clone, generated MACs
// included, so every clone of a template has the template's MAC. vCenter generates a new
// address for every NIC whose addressType is not "manual". vcRequests adds to a CloneVM_Task's
// RelocateSpec.deviceChange an edit of each such source NIC the request does not edit or remove
// itself, with a fresh address from vCenter's range (00:50:56:80-bf); vcsim then keeps guest.net
// (one entry per NIC, keyed by deviceConfigId) in step. The model's own VMs get fresh addresses
// too before the simulator serves (fixExisting), as their addresses derive from their names.
//
// Host placement. A clone without RelocateSpec.host stays on the source's host in vcsim even
// when RelocateSpec.pool belongs to another cluster, so the clone's host is outside the
// cluster its pool says it runs in. vCenter (DRS) picks a host of the pool's cluster;
// vcRequests picks one (round robin) when the source's host is not one of them.
//
// runtime.faultToleranceState and runtime.recordReplayState. govmomi 0.53 made these required
// enum fields of VirtualMachineRuntimeInfo non-optional in its types, and vcsim never sets
// them, so it answers empty enum values that pyVmomi refuses to read, failing every read of a
// VM's runtime ("vim.VirtualMachine.FaultToleranceState has no attribute ''"; govmomi issue
// 4084, open at 0.56). vCenter reports "notConfigured" and "inactive" for a VM without fault
// tolerance or record/replay; vcObjects sets them on every VM the registry receives.

import (
	"crypto/rand"
	"fmt"
	"reflect"
	"sync/atomic"

	"github.com/google/uuid"
	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// nextHost spreads clones over a cluster's hosts.
var nextHost atomic.Uint64

// vcRequests is a simulator.Registry.Handler: it runs before every SOAP method (before
// authentication, fault injection and delays) and may edit the request; it never replaces the
// method's handler (nil) nor fails the call.
func vcRequests(ctx *simulator.Context, m *simulator.Method) (mo.Reference, types.BaseMethodFault) {
	switch req := m.Body.(type) {
	case *types.CreateVM_Task:
		fillUUIDs(&req.Config)
	case *types.CloneVM_Task:
		if req.Spec.Config == nil {
			req.Spec.Config = &types.VirtualMachineConfigSpec{}
		}
		fillUUIDs(req.Spec.Config)
		placeClone(ctx, m.This, &req.Spec.Location)
		freshMACs(ctx, m.This, &req.Spec)
	}
	return nil, nil
}

func fillUUIDs(spec *types.VirtualMachineConfigSpec) {
	if spec.Uuid == "" {
		spec.Uuid = uuid.NewString()
	}
	if spec.InstanceUuid == "" {
		spec.InstanceUuid = uuid.NewString()
	}
}

// placeClone sets loc.Host to a host of loc.Pool's compute resource when the source VM's host
// is not one of them (see the file comment). Unknown references are left for vcsim to refuse.
func placeClone(ctx *simulator.Context, source types.ManagedObjectReference, loc *types.VirtualMachineRelocateSpec) {
	if loc.Pool == nil || loc.Host != nil {
		return
	}
	var owner types.ManagedObjectReference
	switch p := ctx.Map.Get(*loc.Pool).(type) {
	case *simulator.ResourcePool:
		owner = p.Owner
	case *simulator.VirtualApp:
		owner = p.Owner
	default:
		return
	}
	var hosts []types.ManagedObjectReference
	switch cr := ctx.Map.Get(owner).(type) {
	case *simulator.ClusterComputeResource:
		hosts = cr.Host
	case *mo.ComputeResource:
		hosts = cr.Host
	}
	if len(hosts) == 0 {
		return
	}
	if vm, ok := ctx.Map.Get(source).(*simulator.VirtualMachine); ok && vm.Runtime.Host != nil {
		for _, h := range hosts {
			if h == *vm.Runtime.Host {
				return
			}
		}
	}
	host := hosts[nextHost.Add(1)%uint64(len(hosts))]
	loc.Host = &host
}

// vcObjects is a simulator.RegisterObject handler (see the file comment).
type vcObjects struct{}

// Reference identifies the handler in the registry (not an inventory object).
func (vcObjects) Reference() types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: "BanlieueVCenterObjects", Value: "vcenter-objects"}
}

// PutObject runs when the registry receives an object, before any client can read it.
func (vcObjects) PutObject(_ *simulator.Context, o mo.Reference) {
	vm, ok := o.(*simulator.VirtualMachine)
	if !ok {
		return
	}
	for _, rt := range []*types.VirtualMachineRuntimeInfo{&vm.Runtime, &vm.Summary.Runtime} {
		if rt.FaultToleranceState == "" {
			rt.FaultToleranceState = types.VirtualMachineFaultToleranceStateNotConfigured
		}
		if rt.RecordReplayState == "" {
			rt.RecordReplayState = types.VirtualMachineRecordReplayStateInactive
		}
	}
}

func (vcObjects) UpdateObject(*simulator.Context, mo.Reference, []types.PropertyChange) {}

func (vcObjects) RemoveObject(*simulator.Context, types.ManagedObjectReference) {}

// fixExisting applies vcObjects to the VMs the model created before the handler existed and
// gives their generated NICs fresh addresses (call before serving: no locks are taken).
func (h vcObjects) fixExisting(r *simulator.Registry) {
	for _, ref := range r.AllReference("VirtualMachine") {
		vm := ref.(*simulator.VirtualMachine)
		h.PutObject(nil, vm)
		for _, d := range vm.Config.Hardware.Device {
			card, ok := d.(types.BaseVirtualEthernetCard)
			if !ok || card.GetVirtualEthernetCard().AddressType == string(types.VirtualEthernetCardMacTypeManual) {
				continue
			}
			nic := card.GetVirtualEthernetCard()
			nic.MacAddress, nic.AddressType = newMAC(), string(types.VirtualEthernetCardMacTypeAssigned)
			for i := range vm.Guest.Net {
				if vm.Guest.Net[i].DeviceConfigId == nic.Key {
					vm.Guest.Net[i].MacAddress = nic.MacAddress
				}
			}
		}
	}
}

// freshMACs: see the file comment. The source's devices are read without its lock, as vcsim's
// own clone does before it locks; a template does not change while it is cloned.
func freshMACs(ctx *simulator.Context, source types.ManagedObjectReference, spec *types.VirtualMachineCloneSpec) {
	vm, ok := ctx.Map.Get(source).(*simulator.VirtualMachine)
	if !ok || vm.Config == nil {
		return
	}
	handled := map[int32]bool{}
	var changes []types.BaseVirtualDeviceConfigSpec
	changes = append(changes, spec.Location.DeviceChange...)
	if spec.Config != nil {
		changes = append(changes, spec.Config.DeviceChange...)
	}
	for _, c := range changes {
		if ds := c.GetVirtualDeviceConfigSpec(); ds.Device != nil && ds.Operation != types.VirtualDeviceConfigSpecOperationAdd {
			handled[ds.Device.GetVirtualDevice().Key] = true
		}
	}
	for _, d := range vm.Config.Hardware.Device {
		card, ok := d.(types.BaseVirtualEthernetCard)
		if !ok || handled[d.GetVirtualDevice().Key] || card.GetVirtualEthernetCard().AddressType == string(types.VirtualEthernetCardMacTypeManual) {
			continue
		}
		// A copy of the card (its backing shared: vcsim copies the device before applying edits).
		dup := reflect.New(reflect.TypeOf(d).Elem())
		dup.Elem().Set(reflect.ValueOf(d).Elem())
		dev := dup.Interface().(types.BaseVirtualDevice)
		nic := dev.(types.BaseVirtualEthernetCard).GetVirtualEthernetCard()
		nic.MacAddress, nic.AddressType = newMAC(), string(types.VirtualEthernetCardMacTypeAssigned)
		spec.Location.DeviceChange = append(spec.Location.DeviceChange, &types.VirtualDeviceConfigSpec{
			Operation: types.VirtualDeviceConfigSpecOperationEdit,
			Device:    dev,
		})
	}
}

// newMAC returns a random address in vCenter's generated range 00:50:56:80:00:00 to
// 00:50:56:bf:ff:ff.
func newMAC() string {
	b := make([]byte, 3)
	_, _ = rand.Read(b)
	return fmt.Sprintf("00:50:56:%02x:%02x:%02x", 0x80|(b[0]&0x3f), b[1], b[2])
}
