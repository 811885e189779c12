package cli

import (
	"fmt"
	"sort"
	"strings"
	"time"

	ucli "github.com/urfave/cli/v2"

	"github.com/mrmarket/mrmarket/broker"
	"github.com/mrmarket/mrmarket/hadoopvm/yarn"
	"github.com/mrmarket/mrmarket/internal/wire"
)

// stagesCommand is `mrmarket stages`: telling the broker that a stage of a
// workflow started, so the user's stage-priority plans fund it at once
// rather than once the stage before has gone idle (mrm.v1.broker.stage).
func stagesCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "stages",
		Usage: "tell the broker a workflow's stage started: your stage-priority plans move to it",
		UsageText: "mrmarket stages start --user alice --workflow etl --stage stage-2\n" +
			"   mrmarket stages watch --user alice --yarn http://rm:8088 [--every 10s] [--once]",
		Description: "A plan of strategy stage, stage-carry or stage-bottleneck funds one stage of each workflow at a\n" +
			"time, and moves on by itself only once all of the stage's VMs have been idle for a while. Told that\n" +
			"the next stage started, it moves at once. A plan never moves back: telling it of a stage it is at or\n" +
			"past changes nothing, and neither does a workflow or stage no plan of yours has (not an error).\n" +
			"It moves no money: the plan spends the budget you signed, at the pace you signed, on the stage's VMs.",
		Subcommands: []*ucli.Command{stagesStartCommand(), stagesWatchCommand()},
	}
}

func stagesStartCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "start",
		Usage: "tell the broker that a stage of your workflow started; prints the plans that moved",
		UsageText: "mrmarket stages start --user alice --workflow etl --stage stage-2\n\n" +
			"Your running stage-priority plans whose plan file has workflow etl with a stage stage-2 move to\n" +
			"it, unless they are at it or past it already.",
		Flags: marketFlags(
			&ucli.StringFlag{Name: "workflow", Usage: "the workflow's name in the plan file"},
			&ucli.StringFlag{Name: "stage", Usage: "the stage's name in the plan file"},
		),
		Action: func(c *ucli.Context) error {
			user, err := requireUser(c)
			if err != nil {
				return err
			}
			for _, f := range []string{"workflow", "stage"} {
				if c.String(f) == "" {
					return badInput("--%s is required", f)
				}
			}
			req := &wire.StageRequest{User: user, Workflow: c.String("workflow"), Stage: c.String("stage")}
			return call(c, onBroker(broker.Client.StageStarted), req, func(w *out, rep wire.StageReply) error {
				_, err := fmt.Fprintf(w, "%s %s: %s\n", req.Workflow, req.Stage, moved(rep.Plans))
				return err
			})
		},
	}
}

// moved says which plans moved.
func moved(plans []string) string {
	switch len(plans) {
	case 0:
		return "no plan moved (none running is before that stage)"
	case 1:
		return "moved plan " + plans[0]
	}
	return "moved plans " + strings.Join(plans, ", ")
}

// stagesWatchCommand is `mrmarket stages watch`: the YARN monitor telling
// the broker of each stage whose application it sees start.
func stagesWatchCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "watch",
		Usage: "follow your YARN applications named workflow:stage and tell the broker as each stage starts",
		UsageText: "mrmarket stages watch --user alice --yarn http://rm:8088 [--every 10s] [--once]\n\n" +
			"Lists the ResourceManager's applications past ACCEPTED every --every. Each of the user's\n" +
			"applications named \"workflow:stage\" (e.g. etl:stage-2, workflow and stage as in the plan file)\n" +
			"that is RUNNING, or that ended (FINISHED, FAILED, KILLED) after the watch began, is told to the\n" +
			"broker once, and a line printed. Applications that had ended before the watch began are history\n" +
			"(an earlier run of the workflow) and are not told: a plan never moves back. Other users'\n" +
			"applications, and names without a ':', are ignored. With --once: one look, RUNNING only.",
		Flags: marketFlags(
			&ucli.StringFlag{Name: "yarn", Usage: "the ResourceManager's web address"},
			&ucli.DurationFlag{Name: "every", Usage: "how often to look", Value: 10 * time.Second},
			&ucli.BoolFlag{Name: "once", Usage: "look once and exit"},
		),
		Action: func(c *ucli.Context) error {
			user, err := requireUser(c)
			if err != nil {
				return err
			}
			mon, err := yarnWatch(c)
			if err != nil {
				return err
			}
			return withClients(c, func(cl clients) error { return watchStages(c, mon, cl, user) })
		},
	}
}

// stageStarted is what `stages watch` prints of each stage it told (its
// line, or with --json this object): the application, its state, the
// workflow and stage, and the plans that moved.
type stageStarted struct {
	App      string   `json:"app"`
	State    string   `json:"state"`
	Workflow string   `json:"workflow"`
	Stage    string   `json:"stage"`
	Plans    []string `json:"plans"`
}

// startedStates are the application states past ACCEPTED: its
// ApplicationMaster runs, or ran.
var startedStates = []string{yarn.StateRunning, yarn.StateFinished, yarn.StateFailed, yarn.StateKilled}

// stageOf is the workflow and stage an application of user's is named
// for, "workflow:stage", each a name the broker takes.
func stageOf(a yarn.App, user string) (workflow, stage string, ok bool) {
	workflow, stage, ok = strings.Cut(a.Name, ":")
	if !ok || a.User != user || wire.CheckName("workflow", workflow) != nil || wire.CheckName("stage", stage) != nil {
		return "", "", false
	}
	return workflow, stage, true
}

// watchStages tells the broker of each started stage application of
// user's, once per application, every --every (or once with --once). An
// application that had ended by the first look is an earlier run's, and
// telling of it could move a plan of this run to a stage it has not
// reached, for good; one that ended since started while the watch looked
// away, and is told.
func watchStages(c *ucli.Context, mon *yarn.Monitor, cl clients, user string) error {
	tell := retried(onBroker(broker.Client.StageStarted))
	seen := map[string]bool{} // applications told, or history
	for first := true; ; first = false {
		apps, err := mon.Apps(c.Context, startedStates...)
		if err != nil {
			return wire.Errorf(wire.ErrUnavailable, "%v", err)
		}
		sort.SliceStable(apps, func(i, j int) bool {
			if apps[i].StartedTime != apps[j].StartedTime {
				return apps[i].StartedTime < apps[j].StartedTime
			}
			return apps[i].ID < apps[j].ID
		})
		for _, a := range apps {
			workflow, stage, ok := stageOf(a, user)
			if !ok || seen[a.ID] {
				continue
			}
			if first && a.State != yarn.StateRunning {
				seen[a.ID] = true // history
				continue
			}
			rep, err := tell(c.Context, cl, &wire.StageRequest{User: user, Workflow: workflow, Stage: stage})
			if err != nil {
				return err
			}
			seen[a.ID] = true
			if err := show(c, stageStarted{App: a.ID, State: a.State, Workflow: workflow, Stage: stage, Plans: rep.Plans}, printStageStarted); err != nil {
				return err
			}
		}
		if c.Bool("once") || !nextLook(c) {
			return nil
		}
	}
}

func printStageStarted(w *out, s stageStarted) error {
	_, err := fmt.Fprintf(w, "%s %s:%s (%s): %s\n", s.App, s.Workflow, s.Stage, s.State, moved(s.Plans))
	return err
}
