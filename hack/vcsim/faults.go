package main

// --fault and --task-delay: vcsim 0.56's own fault injection, as flags.
//
// --fault=Method:Fault[:Count],... adds a simulator.FaultInjectionRule per entry: every call of
// the SOAP method (e.g. CloneVM_Task), on any object, answers that fault instead of running, at
// most Count times (0 or none: every time). vcsim checks the rule after authentication and
// before the method's delay and lock, so the call fails at once and changes nothing. Fault names:
// see faults.
//
// --task-delay=Task=ms,... sets simulator.TaskDelay: the task's body starts that much later,
// after the SOAP call has returned the (running) task, as vCenter's tasks do. Task names are
// vcsim's (TaskInfo.name: CloneVm, PowerOn, ReconfigVm, Destroy, ...; `govc tasks` shows them).

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/vmware/govmomi/simulator"
	"github.com/vmware/govmomi/vim25/types"
)

// faults: the --fault names and the vSphere fault each answers. Built here rather than with
// vcsim's FaultType values, some of which pyVmomi cannot read (a SystemErrorFault type name, an
// InsufficientResourcesFault whose faultCause has no fault).
var faults = map[string]func() types.BaseMethodFault{
	"InsufficientResourcesFault": func() types.BaseMethodFault { return &types.InsufficientResourcesFault{} },
	"InvalidState":               func() types.BaseMethodFault { return &types.InvalidState{} },
	"ResourceInUse":              func() types.BaseMethodFault { return &types.ResourceInUse{} },
	"TaskInProgress":             func() types.BaseMethodFault { return &types.TaskInProgress{} },
	"HostCommunication":          func() types.BaseMethodFault { return &types.HostCommunication{} },
	"NotAuthenticated":           func() types.BaseMethodFault { return &types.NotAuthenticated{} },
	"NoPermission":               func() types.BaseMethodFault { return &types.NoPermission{PrivilegeId: "System.Modify"} },
	"InvalidArgument":            func() types.BaseMethodFault { return &types.InvalidArgument{} },
	"ManagedObjectNotFound":      func() types.BaseMethodFault { return &types.ManagedObjectNotFound{} },
}

// parseFaults reads --fault into rules (not yet added: see main).
func parseFaults(s string) ([]*simulator.FaultInjectionRule, error) {
	var rules []*simulator.FaultInjectionRule
	for _, p := range splitList(s) {
		parts := strings.Split(p, ":")
		if len(parts) < 2 || len(parts) > 3 || parts[0] == "" {
			return nil, fmt.Errorf("--fault: %q is not Method:Fault[:Count]", p)
		}
		newFault, ok := faults[parts[1]]
		if !ok {
			return nil, fmt.Errorf("--fault: %q: unknown fault %q", p, parts[1])
		}
		count := 0
		if len(parts) == 3 {
			n, err := strconv.Atoi(parts[2])
			if err != nil || n < 0 {
				return nil, fmt.Errorf("--fault: %q: count must be a number >= 0", p)
			}
			count = n
		}
		rules = append(rules, &simulator.FaultInjectionRule{
			MethodName: parts[0], ObjectType: "*", ObjectName: "*", Probability: 1,
			FaultType: simulator.FaultTypeCustom, Fault: newFault(),
			Message: "injected by vcsim --fault", MaxCount: count, Enabled: true,
		})
	}
	return rules, nil
}
