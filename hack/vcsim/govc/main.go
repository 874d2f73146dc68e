// Command govc is govmomi's vSphere CLI with the commands banlieue's docs use to look into a
// simulator (or a vCenter): inventory (ls, find, object.collect), VMs, devices, snapshots,
// hosts, clusters, pools, datastores, folders, events, tasks, tags and content libraries.
// Each imported package registers its commands (cli.Register in an init function); cli.Run
// parses the command line. Configure with GOVC_URL, GOVC_USERNAME, GOVC_PASSWORD and
// GOVC_TLS_CA_CERTS (or GOVC_INSECURE=1); see docs/operations.md.
package main

import (
	"os"

	"github.com/vmware/govmomi/cli"
	_ "github.com/vmware/govmomi/cli/about"
	_ "github.com/vmware/govmomi/cli/cluster"
	_ "github.com/vmware/govmomi/cli/datacenter"
	_ "github.com/vmware/govmomi/cli/datastore"
	_ "github.com/vmware/govmomi/cli/device"
	_ "github.com/vmware/govmomi/cli/events"
	_ "github.com/vmware/govmomi/cli/fields"
	_ "github.com/vmware/govmomi/cli/folder"
	_ "github.com/vmware/govmomi/cli/host"
	_ "github.com/vmware/govmomi/cli/library"
	_ "github.com/vmware/govmomi/cli/object"
	_ "github.com/vmware/govmomi/cli/pool"
	_ "github.com/vmware/govmomi/cli/session"
	_ "github.com/vmware/govmomi/cli/tags"
	_ "github.com/vmware/govmomi/cli/task"
	_ "github.com/vmware/govmomi/cli/version"
	_ "github.com/vmware/govmomi/cli/vm"
	_ "github.com/vmware/govmomi/cli/vm/network"
	_ "github.com/vmware/govmomi/cli/vm/snapshot"
)

func main() {
	os.Exit(cli.Run(os.Args[1:]))
}
