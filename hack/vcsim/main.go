// Command vcsim runs govmomi's vCenter simulator (github.com/vmware/govmomi/simulator, pinned in
// go.mod) with the inventory banlieue's tests need.
//
// The govmomi module carries the simulator package but not the vcsim command, so this small main
// builds the model (datacenters x clusters x hosts, VMs per resource pool, standalone hosts),
// turns some VMs into named templates, adds datastores and distributed port groups with given
// names, sets the login, optionally serves TLS with a freshly generated CA + server certificate
// (the simulator's built-in certificate is too weak for current OpenSSL defaults), serves the
// vAPI REST endpoints, makes vcsim behave like vCenter where clients see the difference
// (vcenter.go), applies method and task delays and injected faults (faults.go), optionally plays
// DHCP and VMware Tools for powered-on guests (--guest-ip, guestnet.go), then prints its SDK URL
// on stdout and writes a JSON info file. It runs until SIGTERM or SIGINT. README.md says why each
// part is here.
//
// Build (module mode, the default GOCACHE and GOMODCACHE): make vcsim, i.e. in this directory
//
//	GOTOOLCHAIN=local GOFLAGS=-mod=readonly go build -o ../../bin/vcsim .
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"flag"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/vmware/govmomi"
	"github.com/vmware/govmomi/find"
	"github.com/vmware/govmomi/object"
	"github.com/vmware/govmomi/simulator"
	_ "github.com/vmware/govmomi/vapi/simulator" // the vAPI REST endpoints (/rest, /api): sessions, tags, content libraries
	"github.com/vmware/govmomi/vim25"
	"github.com/vmware/govmomi/vim25/types"
)

// info is what --info-file receives: everything a test needs to connect and to know the inventory.
type info struct {
	URL         string              `json:"url"`
	Host        string              `json:"host"`
	Port        int                 `json:"port"`
	Username    string              `json:"username"`
	Password    string              `json:"password"`
	TLS         bool                `json:"tls"`
	Insecure    bool                `json:"insecure"`
	CAFile      string              `json:"ca_file"`
	Datacenters []string            `json:"datacenters"`
	Clusters    map[string][]string `json:"clusters"`
	Templates   map[string][]string `json:"templates"`
	Datastores  map[string][]string `json:"datastores"`
	Networks    map[string][]string `json:"networks"`
	// DatastoreClusters: datacenter -> datastore cluster (StoragePod) name -> member datastores.
	DatastoreClusters map[string]map[string][]string `json:"datastore_clusters"`
	// GuestIP: the --guest-ip range ("" when guests report no address).
	GuestIP string `json:"guest_ip"`
	// InstanceUUID: ServiceContent.about.instanceUuid, the vCenter's identity (--instance-uuid).
	InstanceUUID string `json:"instance_uuid"`
	PID          int    `json:"pid"`

	tempDirs []string // extra datastores' backing directories, removed on exit
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// parseDelays reads "Method=ms,Method2=ms" (flag name for errors) into a DelayConfig.MethodDelay map.
func parseDelays(flagName, s string) (map[string]int, error) {
	out := map[string]int{}
	for _, p := range splitList(s) {
		kv := strings.SplitN(p, "=", 2)
		if len(kv) != 2 {
			return nil, fmt.Errorf("--%s: %q is not Name=milliseconds", flagName, p)
		}
		ms, err := strconv.Atoi(kv[1])
		if err != nil {
			return nil, fmt.Errorf("--%s: %q: %v", flagName, p, err)
		}
		out[kv[0]] = ms
	}
	return out, nil
}

func writePEM(path, kind string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), 0o600)
}

// makeTLS generates a self-signed ECDSA P-256 CA and a server certificate for 127.0.0.1 and
// localhost signed by it; writes ca.pem, server.pem and server-key.pem into dir.
func makeTLS(dir string) (*tls.Config, string, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, "", err
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(now.UnixNano()),
		Subject:               pkix.Name{CommonName: "banlieue vcsim test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(7 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, "", err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, "", err
	}
	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, "", err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(now.UnixNano() + 1),
		Subject:      pkix.Name{CommonName: "127.0.0.1"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(7 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		DNSNames:     []string{"localhost"},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, caCert, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, "", err
	}
	keyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, "", err
	}
	caFile := filepath.Join(dir, "ca.pem")
	if err := writePEM(caFile, "CERTIFICATE", caDER); err != nil {
		return nil, "", err
	}
	if err := writePEM(filepath.Join(dir, "server.pem"), "CERTIFICATE", srvDER); err != nil {
		return nil, "", err
	}
	if err := writePEM(filepath.Join(dir, "server-key.pem"), "EC PRIVATE KEY", keyDER); err != nil {
		return nil, "", err
	}
	cert := tls.Certificate{Certificate: [][]byte{srvDER, caDER}, PrivateKey: srvKey}
	return &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, caFile, nil
}

// customize renames VMs into templates, adds datastores and port groups, and fills inv.
// parsePods reads "gold=ds1+ds2,silver=ds3" into name -> datastore names.
func parsePods(s string) (map[string][]string, error) {
	out := map[string][]string{}
	for _, p := range splitList(s) {
		kv := strings.SplitN(p, "=", 2)
		if len(kv) != 2 || kv[0] == "" || kv[1] == "" {
			return nil, fmt.Errorf("--datastore-clusters: %q is not name=ds1+ds2", p)
		}
		out[kv[0]] = strings.Split(kv[1], "+")
	}
	return out, nil
}

func customize(ctx context.Context, c *vim25.Client, templates, datastores, portgroups []string, pods map[string][]string, inv *info) error {
	finder := find.NewFinder(c, false)
	dcs, err := finder.DatacenterList(ctx, "*")
	if err != nil {
		return err
	}
	for _, dc := range dcs {
		dcName := dc.Name()
		inv.Datacenters = append(inv.Datacenters, dcName)
		finder.SetDatacenter(dc)

		clusters, err := finder.ClusterComputeResourceList(ctx, "*")
		if err != nil && len(clusters) > 0 {
			return err
		}
		inv.Clusters[dcName] = []string{}
		for _, cl := range clusters {
			inv.Clusters[dcName] = append(inv.Clusters[dcName], cl.Name())
		}

		vms, _ := finder.VirtualMachineList(ctx, "*")
		if len(vms) < len(templates) {
			return fmt.Errorf("datacenter %s has %d VMs, %d templates requested: raise --vm", dcName, len(vms), len(templates))
		}
		inv.Templates[dcName] = []string{}
		for i, name := range templates {
			vm := vms[i]
			state, err := vm.PowerState(ctx)
			if err != nil {
				return err
			}
			if state != types.VirtualMachinePowerStatePoweredOff {
				task, err := vm.PowerOff(ctx)
				if err != nil {
					return err
				}
				if err := task.Wait(ctx); err != nil {
					return err
				}
			}
			task, err := vm.Rename(ctx, name)
			if err != nil {
				return err
			}
			if err := task.Wait(ctx); err != nil {
				return err
			}
			if err := vm.MarkAsTemplate(ctx); err != nil {
				return err
			}
			inv.Templates[dcName] = append(inv.Templates[dcName], name)
		}

		hosts, err := finder.HostSystemList(ctx, "*")
		if err != nil {
			return err
		}
		for _, name := range datastores {
			dir, err := os.MkdirTemp("", "banlieue-vcsim-"+dcName+"-")
			if err != nil {
				return err
			}
			inv.tempDirs = append(inv.tempDirs, dir)
			for _, h := range hosts {
				dss, err := h.ConfigManager().DatastoreSystem(ctx)
				if err != nil {
					return err
				}
				if _, err := dss.CreateLocalDatastore(ctx, name, dir); err != nil {
					return err
				}
			}
		}
		inv.DatastoreClusters[dcName] = map[string][]string{}
		if len(pods) > 0 {
			folders, err := dc.Folders(ctx)
			if err != nil {
				return err
			}
			for name, members := range pods {
				pod, err := folders.DatastoreFolder.CreateStoragePod(ctx, name)
				if err != nil {
					return err
				}
				var refs []types.ManagedObjectReference
				for _, m := range members {
					ds, err := finder.Datastore(ctx, m)
					if err != nil {
						return fmt.Errorf("--datastore-clusters: %s: %v", m, err)
					}
					refs = append(refs, ds.Reference())
				}
				task, err := pod.MoveInto(ctx, refs)
				if err != nil {
					return err
				}
				if err := task.Wait(ctx); err != nil {
					return err
				}
				inv.DatastoreClusters[dcName][name] = members
			}
		}
		allDS, _ := finder.DatastoreList(ctx, "*")
		inv.Datastores[dcName] = []string{}
		seen := map[string]bool{}
		for _, ds := range allDS {
			if !seen[ds.Name()] {
				seen[ds.Name()] = true
				inv.Datastores[dcName] = append(inv.Datastores[dcName], ds.Name())
			}
		}

		if len(portgroups) > 0 {
			nets, err := finder.NetworkList(ctx, "*")
			if err != nil {
				return err
			}
			var dvs *object.DistributedVirtualSwitch
			for _, n := range nets {
				if d, ok := n.(*object.DistributedVirtualSwitch); ok {
					dvs = d
					break
				}
			}
			if dvs == nil {
				return fmt.Errorf("datacenter %s has no distributed switch: --pg must be >= 1 for --portgroups", dcName)
			}
			for _, name := range portgroups {
				task, err := dvs.AddPortgroup(ctx, []types.DVPortgroupConfigSpec{{Name: name, NumPorts: 128}})
				if err != nil {
					return err
				}
				if err := task.Wait(ctx); err != nil {
					return err
				}
			}
		}
		nets, _ := finder.NetworkList(ctx, "*")
		inv.Networks[dcName] = []string{}
		for _, n := range nets {
			if _, isSwitch := n.(*object.DistributedVirtualSwitch); isSwitch {
				continue
			}
			if el, err := finder.Element(ctx, n.Reference()); err == nil {
				inv.Networks[dcName] = append(inv.Networks[dcName], filepath.Base(el.Path))
			}
		}
	}
	return nil
}

func main() {
	log.SetFlags(0)
	log.SetPrefix("vcsim: ")
	listen := flag.String("listen", "127.0.0.1:0", "listen address host:port (port 0 picks a free port)")
	dc := flag.Int("dc", 2, "number of datacenters")
	cluster := flag.Int("cluster", 3, "clusters per datacenter")
	host := flag.Int("host", 2, "hosts per cluster")
	standalone := flag.Int("standalone-host", 1, "standalone hosts per datacenter")
	vm := flag.Int("vm", 1, "VMs per resource pool (each cluster and standalone host has one)")
	pool := flag.Int("pool", 0, "extra resource pools per cluster")
	pod := flag.Int("pod", 0, "datastore clusters (StoragePods) per datacenter")
	pg := flag.Int("pg", 1, "numbered distributed port groups per datacenter (DCn_DVPGm)")
	ds := flag.Int("ds", 1, "numbered local datastores (LocalDS_n)")
	autostart := flag.Bool("autostart", false, "power on the model's VMs")
	templates := flag.String("templates", "ubuntu-22.04", "comma list of template names made from existing VMs in every datacenter")
	datastores := flag.String("datastores", "", "comma list of extra datastore names mounted on every host")
	portgroups := flag.String("portgroups", "", "comma list of extra distributed port group names in every datacenter")
	datastoreClusters := flag.String("datastore-clusters", "", "datastore clusters in every datacenter: name=ds1+ds2,name2=ds3 (datastores must exist)")
	username := flag.String("username", "user", "login user name")
	password := flag.String("password", "pass", "login password")
	passwordFile := flag.String("password-file", "", "read the login password from this file at every Login (surrounding white space dropped) instead of --password, so a test can change it while the simulator runs, as an administrator rotates a vCenter password; sessions already logged in stay valid, as on vCenter")
	useTLS := flag.Bool("tls", false, "serve https with a generated CA + server certificate")
	tlsDir := flag.String("tls-dir", "", "directory for ca.pem, server.pem, server-key.pem (default: a temp dir)")
	methodDelay := flag.String("method-delay", "", "per-method delay, e.g. CloneVM_Task=5000,PowerOnVM_Task=100 (ms)")
	delay := flag.Int("delay", 0, "global delay before every SOAP method (ms)")
	taskDelay := flag.String("task-delay", "", "per-task delay after the call returned the running task, by vcsim's task name (govc tasks), e.g. CloneVm=3000,PowerOn=100 (ms; faults.go)")
	fault := flag.String("fault", "", "answer a SOAP method with a fault, at most Count times (0: always), e.g. CloneVM_Task:InsufficientResourcesFault:2 (faults.go)")
	jitter := flag.Float64("delay-jitter", 0, "delay jitter as coefficient of variation")
	infoFile := flag.String("info-file", "", "write connection details and inventory as JSON here")
	stdinEOF := flag.Bool("exit-on-stdin-eof", false, "exit when stdin closes (the parent died): no leaked simulators")
	cpuProfile := flag.String("cpuprofile", "", "write a Go CPU profile (runtime/pprof) here until exit; read it with `go tool pprof -top bin/vcsim FILE`")
	batch := flag.Bool("batch-collector", false, "PropertyCollector.WaitForUpdatesEx collects each filter once per 250 ms tick instead of once per changed object (collector.go; for benchmarks at scale)")
	instanceUUID := flag.String("instance-uuid", "", "ServiceContent.about.instanceUuid, the vCenter's identity (default: a random UUID; pass the same one to restart the same vCenter: vcsim 0.56 otherwise reports one derived from the host's MAC, the same for every simulator on a machine)")
	guestIP := flag.String("guest-ip", "", "IPv4 CIDR (a documentation range, e.g. 192.0.2.0/24): powered-on guests report their static guestinfo address, else one leased from it (default: guests report none)")
	flag.Parse()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		// Stopped (and the file completed) after the signal below: see the end of main.
		defer func() {
			pprof.StopCPUProfile()
			_ = f.Close()
		}()
	}

	delays, err := parseDelays("method-delay", *methodDelay)
	if err != nil {
		log.Fatal(err)
	}
	taskDelays, err := parseDelays("task-delay", *taskDelay)
	if err != nil {
		log.Fatal(err)
	}
	faultRules, err := parseFaults(*fault)
	if err != nil {
		log.Fatal(err)
	}
	pods, err := parsePods(*datastoreClusters)
	if err != nil {
		log.Fatal(err)
	}
	var guests *guestNetwork
	if *guestIP != "" {
		if guests, err = newGuestNetwork(*guestIP); err != nil {
			log.Fatal(err)
		}
	}

	if *passwordFile != "" {
		if *password, err = readPassword(*passwordFile); err != nil {
			log.Fatalf("--password-file: %v", err)
		}
	}

	m := simulator.VPX()
	m.Datacenter = *dc
	m.Cluster = *cluster
	m.ClusterHost = *host
	m.Host = *standalone
	m.Machine = *vm
	m.Pool = *pool
	m.Pod = *pod
	m.Portgroup = *pg
	m.Datastore = *ds
	m.Autostart = *autostart
	// The delay pointer is read by the service on each call; keep it zero while customizing.
	m.DelayConfig = simulator.DelayConfig{}
	if err := m.Create(); err != nil {
		log.Fatalf("create model: %v", err)
	}
	defer m.Remove()
	// vcsim 0.56 draws a random instance UUID but stores the content before it (service_instance.go):
	// every simulator reports the one derived from the host's MAC. Set it on the served content.
	if *instanceUUID == "" {
		*instanceUUID = uuid.New().String()
	} else if _, err := uuid.Parse(*instanceUUID); err != nil {
		log.Fatalf("--instance-uuid: %v", err)
	}
	serviceInstance := m.Map().Get(vim25.ServiceInstance).(*simulator.ServiceInstance)
	serviceInstance.Content.About.InstanceUuid = *instanceUUID
	// vcenter.go: before the inventory is customized or served.
	m.Map().Handler = vcRequests
	vcObjects{}.fixExisting(m.Map())
	m.Map().AddHandler(vcObjects{})

	inv := &info{
		Username: *username, Password: *password, TLS: *useTLS, Insecure: !*useTLS,
		Clusters: map[string][]string{}, Templates: map[string][]string{},
		Datastores: map[string][]string{}, Networks: map[string][]string{}, PID: os.Getpid(),
		DatastoreClusters: map[string]map[string][]string{}, InstanceUUID: *instanceUUID,
	}
	ctx := context.Background()

	m.Service.Listen = &url.URL{Host: *listen, User: url.UserPassword(*username, *password)}
	if *passwordFile != "" {
		// SessionManager.ValidLogin is the simulator's hook for its Login check (session_manager.go
		// Authenticate); a file that cannot be read refuses every login.
		m.Map().SessionManager().ValidLogin = func(req *types.Login) bool {
			current, err := readPassword(*passwordFile)
			return err == nil && req.UserName == *username && req.Password == current
		}
	}
	if *useTLS {
		dir := *tlsDir
		if dir == "" {
			dir, err = os.MkdirTemp("", "banlieue-vcsim-tls-")
			if err != nil {
				log.Fatal(err)
			}
			defer os.RemoveAll(dir)
		}
		cfg, caFile, err := makeTLS(dir)
		if err != nil {
			log.Fatalf("tls: %v", err)
		}
		m.Service.TLS = cfg
		inv.CAFile = caFile
	}
	m.Service.RegisterEndpoints = true // vapi/simulator (imported above) serves /rest and /api
	srv := m.Service.NewServer()
	defer srv.Close()

	// Customize through a client of our own before anyone knows the URL (no delays yet).
	client, err := govmomi.NewClient(ctx, srv.URL, true)
	if err != nil {
		log.Fatalf("connect to self: %v", err)
	}
	if err := customize(ctx, client.Client, splitList(*templates), splitList(*datastores), splitList(*portgroups), pods, inv); err != nil {
		log.Fatalf("customize: %v", err)
	}
	_ = client.Logout(ctx)
	defer func() {
		for _, d := range inv.tempDirs {
			_ = os.RemoveAll(d)
		}
	}()

	if *batch {
		installBatchCollector(m.Map())
	}
	if guests != nil {
		// After customize: the model's own VMs are not guests banlieue asked for.
		m.Map().AddHandler(guests)
		inv.GuestIP = *guestIP
	}
	m.DelayConfig.Delay = *delay
	m.DelayConfig.DelayJitter = *jitter
	m.DelayConfig.MethodDelay = delays
	simulator.TaskDelay.MethodDelay = taskDelays
	for _, rule := range faultRules {
		m.Service.AddFaultRule(rule)
	}

	u := *srv.URL
	u.User = nil
	inv.URL = u.String()
	inv.Host = u.Hostname()
	inv.Port, _ = strconv.Atoi(u.Port())
	if *infoFile != "" {
		data, _ := json.MarshalIndent(inv, "", "  ")
		tmp := *infoFile + ".tmp"
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			log.Fatal(err)
		}
		// Rename makes the file appear complete: readers poll for its existence.
		if err := os.Rename(tmp, *infoFile); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println(inv.URL)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if *stdinEOF {
		go func() {
			_, _ = io.Copy(io.Discard, os.Stdin)
			sig <- syscall.SIGTERM
		}()
	}
	<-sig
	// The deferred clean-up runs next, and srv.Close waits for every request in progress: a
	// long poll (WaitForUpdatesEx) whose client died holds it for its whole wait (measured: a
	// SIGTERMed simulator still alive 20 s later), so a `banlieue dev` killed with -9 left its
	// simulators running. Past the grace period the simulator exits anyway, temp dirs removed.
	time.AfterFunc(shutdownGrace, func() {
		for _, d := range inv.tempDirs {
			_ = os.RemoveAll(d)
		}
		log.Printf("requests still in progress %s after the stop signal: exiting", shutdownGrace)
		os.Exit(0)
	})
}

// readPassword returns the content of path without surrounding white space; an empty one is an error.
func readPassword(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	pass := strings.TrimSpace(string(data))
	if pass == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return pass, nil
}

// shutdownGrace bounds the clean-up after SIGTERM/SIGINT/stdin EOF.
const shutdownGrace = 3 * time.Second
