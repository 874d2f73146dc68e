package main

// --guest-ip: DHCP and VMware Tools for the simulator, whose guests never report an address.
//
// A real guest reports its addresses through VMware Tools some moments after it powers on. vcsim
// (0.24, and still 0.56) reports none for a plain VM: 0.56 keeps guest.net in step with the VM's
// NICs (one entry per NIC, with that NIC's MAC, also after a clone replaced them) but fills in
// addresses only from a customization spec (CustomizeVM / a clone's Customization with fixed
// IPs or CloudinitPrep metadata), the SET.guest.ipAddress extraConfig alias, or a container
// backing (RUN.container, needs docker). banlieue, like CAPV, gives the guest its network
// through guestinfo.metadata, which vcsim does not read. With
// --guest-ip=CIDR, a registry handler (simulator.RegisterObject: it sees every property change)
// notices each VM that powers on without an address and, once the power-on has released the VM's
// lock, reports for every NIC (guest.net, matched by MAC) the static addresses the cloud-init
// network config in guestinfo.metadata gives it, else an address leased from CIDR; guest.ipAddress
// is the first NIC's first address. Leases are per VM and NIC, kept for the process's life (a VM
// powered on again gets the same address, as from a DHCP server). The addresses are strings the
// simulator reports, never contacted: use documentation ranges (RFC 5737: 192.0.2.0/24,
// 198.51.100.0/24, 203.0.113.0/24). The network address and the first host (the gateway) are
// never leased; an exhausted range leaves the NIC without an address (logged).

import (
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log"
	"net"
	"sort"
	"strings"
	"sync"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/mo"
	"github.com/vmware/govmomi/vim25/types"
)

// guestNetwork is the --guest-ip handler; register it with the model's Registry.AddHandler.
type guestNetwork struct {
	base   uint32 // first address of the range (IPv4, host order)
	size   uint32 // addresses in the range
	mu     sync.Mutex
	leases map[string]string // "<vm moref>/<nic index>" -> address
	next   uint32            // offset of the next address to lease
}

// newGuestNetwork parses an IPv4 CIDR such as 192.0.2.0/24 (at least 4 addresses).
func newGuestNetwork(cidr string) (*guestNetwork, error) {
	_, ipnet, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil, fmt.Errorf("--guest-ip: %v", err)
	}
	ip4 := ipnet.IP.To4()
	ones, bits := ipnet.Mask.Size()
	if ip4 == nil || bits != 32 || ones > 30 {
		return nil, fmt.Errorf("--guest-ip: %q is not an IPv4 range of 4 addresses or more", cidr)
	}
	return &guestNetwork{
		base:   binary.BigEndian.Uint32(ip4),
		size:   uint32(1) << uint(32-ones),
		leases: map[string]string{},
		next:   2, // .0 is the network, .1 the gateway
	}, nil
}

// Reference identifies the handler in the registry (not an inventory object).
func (g *guestNetwork) Reference() types.ManagedObjectReference {
	return types.ManagedObjectReference{Type: "BanlieueGuestNetwork", Value: "guest-network"}
}

// PutObject: nothing to do when an object is created.
func (g *guestNetwork) PutObject(*simulator.Context, mo.Reference) {}

// RemoveObject: leases stay (moref values are never reused by the simulator).
func (g *guestNetwork) RemoveObject(*simulator.Context, types.ManagedObjectReference) {}

// UpdateObject sees every property change; a VM's runtime.powerState becoming poweredOn
// schedules the report. It runs while the power-on task holds the VM's lock, so the report runs
// on its own goroutine and takes the lock when the task has released it.
func (g *guestNetwork) UpdateObject(ctx *simulator.Context, obj mo.Reference, changes []types.PropertyChange) {
	ref := obj.Reference()
	if ref.Type != "VirtualMachine" {
		return
	}
	for _, c := range changes {
		if c.Name == "runtime.powerState" && fmt.Sprint(c.Val) == string(types.VirtualMachinePowerStatePoweredOn) {
			go g.report(ctx, ref)
			return
		}
	}
}

// lease returns the address of (vm, nic), leasing the next free one; "" when the range is used up.
func (g *guestNetwork) lease(vm string, nic int) string {
	g.mu.Lock()
	defer g.mu.Unlock()
	key := fmt.Sprintf("%s/%d", vm, nic)
	if ip, ok := g.leases[key]; ok {
		return ip
	}
	if g.next >= g.size-1 { // the last address is the broadcast address
		log.Printf("--guest-ip: range exhausted, %s NIC %d gets no address", vm, nic)
		return ""
	}
	b := make([]byte, 4)
	binary.BigEndian.PutUint32(b, g.base+g.next)
	g.next++
	ip := net.IP(b).String()
	g.leases[key] = ip
	return ip
}

// report gives a powered-on VM without an address its addresses (see the file comment).
// parent is the power-on's context; the report locks under a copy of its own, because vcsim's
// object locks are re-entrant per context (a shared one would not wait for the task's lock).
func (g *guestNetwork) report(parent *simulator.Context, ref types.ManagedObjectReference) {
	own := *parent
	ctx := &own
	vm, ok := ctx.Map.Get(ref).(*simulator.VirtualMachine)
	if !ok {
		return // destroyed meanwhile
	}
	ctx.WithLock(vm, func() {
		if vm.Runtime.PowerState != types.VirtualMachinePowerStatePoweredOn || vm.Guest == nil || vm.Guest.IpAddress != "" {
			return
		}
		statics, ordered := staticAddresses(vm.Config)
		primary := ""
		for i := range vm.Guest.Net {
			nic := &vm.Guest.Net[i]
			addrs := statics[strings.ToLower(nic.MacAddress)]
			if len(addrs) == 0 {
				if ip := g.lease(ref.Value, i); ip != "" {
					addrs = []string{ip}
				}
			}
			nic.IpAddress = addrs
			if primary == "" && len(addrs) > 0 {
				primary = addrs[0]
			}
		}
		if len(vm.Guest.Net) == 0 { // no NIC the simulator knows of: report the address alone
			if len(ordered) > 0 {
				primary = ordered[0]
			} else {
				primary = g.lease(ref.Value, 0)
			}
		}
		if primary == "" {
			return
		}
		ctx.Update(vm, []types.PropertyChange{
			{Name: "guest.ipAddress", Val: primary},
			{Name: "summary.guest.ipAddress", Val: primary},
			{Name: "guest.net", Val: vm.Guest.Net},
		})
	})
}

// cloudInitMetadata is the part of banlieue's guestinfo.metadata (JSON; cloud-init network
// config v2 under "network") that says which addresses a NIC is statically configured with.
type cloudInitMetadata struct {
	Network struct {
		Ethernets map[string]struct {
			Match struct {
				MACAddress string `json:"macaddress"`
			} `json:"match"`
			Addresses []string `json:"addresses"`
		} `json:"ethernets"`
	} `json:"network"`
}

// staticAddresses reads guestinfo.metadata (encoding "base64" or none): MAC (lower case) ->
// static addresses without prefix length, and every static address in ethernet-id order. Missing
// or unreadable metadata means none (every NIC uses DHCP).
func staticAddresses(cfg *types.VirtualMachineConfigInfo) (map[string][]string, []string) {
	byMAC := map[string][]string{}
	var ordered []string
	if cfg == nil {
		return byMAC, ordered
	}
	extra := map[string]string{}
	for _, o := range cfg.ExtraConfig {
		if v := o.GetOptionValue(); v != nil {
			extra[v.Key] = fmt.Sprint(v.Value)
		}
	}
	raw := []byte(extra["guestinfo.metadata"])
	if len(raw) == 0 {
		return byMAC, ordered
	}
	if enc := extra["guestinfo.metadata.encoding"]; enc == "base64" || enc == "b64" {
		decoded, err := base64.StdEncoding.DecodeString(string(raw))
		if err != nil {
			return byMAC, ordered
		}
		raw = decoded
	}
	var md cloudInitMetadata
	if err := json.Unmarshal(raw, &md); err != nil {
		return byMAC, ordered
	}
	ids := make([]string, 0, len(md.Network.Ethernets))
	for id := range md.Network.Ethernets {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		eth := md.Network.Ethernets[id]
		for _, a := range eth.Addresses {
			ip := strings.SplitN(a, "/", 2)[0]
			ordered = append(ordered, ip)
			if mac := strings.ToLower(eth.Match.MACAddress); mac != "" {
				byMAC[mac] = append(byMAC[mac], ip)
			}
		}
	}
	return byMAC, ordered
}
