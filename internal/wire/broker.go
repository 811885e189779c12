package wire

import (
	"errors"
	"strings"
	"time"

	"github.com/mrmarket/mrmarket/internal/money"
)

// Subjects of the broker's plans, prices and predictions (its deadline
// service is in jobs.go) and the JetStream buckets its replicas share.
const (
	BrokerSpend   = "mrm.v1.broker.spend"
	BrokerCancel  = "mrm.v1.broker.cancel"
	BrokerPlans   = "mrm.v1.broker.plans"
	BrokerPrice   = "mrm.v1.broker.price"
	BrokerVMs     = "mrm.v1.broker.vms"
	BrokerAdjust  = "mrm.v1.broker.adjust"
	BrokerPredict = "mrm.v1.broker.predict"
	BrokerStage   = "mrm.v1.broker.stage"

	// QueueBroker is the queue group the broker's replicas share.
	QueueBroker = "mrm-broker"

	// BucketPlans holds the broker's plans (key: plan id) and its replicas'
	// heartbeats (key: "replica.<id>").
	BucketPlans = "MRM_PLANS"
	// BucketNonces holds the nonces of the signed requests the broker
	// replicas served (key: a hash of signer and nonce), with a TTL past
	// their freshness: a replay to another replica or after a restart is
	// refused.
	BucketNonces = "MRM_NONCES"
)

// Strategy names.
const (
	StrategyFair     = "fair"     // constant rate, the baseline
	StrategyWorkflow = "workflow" // workflow priority (Sandholm and Lai, Regulated Dynamic Prioritization, Eq. 8)
	StrategyStage    = "stage"    // stage priority (Eq. 9): each stage a fixed part of the budget
	// StrategyStageCarry is ours: stage priority that re-splits what is
	// left over the stages left, so an early stage's unspent money carries
	// forward to the later ones.
	StrategyStageCarry = "stage-carry"
	// StrategyStageBottleneck is ours: stage-carry across a workflow's
	// stages, bottleneck elimination (Boost) among the active stage's VMs.
	StrategyStageBottleneck = "stage-bottleneck"
	StrategyBottleneck      = "bottleneck"    // bottleneck elimination (Alg. 5.1)
	StrategyBestResp        = "best-response" // best response across hosts (§5.4)
)

// Strategies lists the strategy names.
var Strategies = []string{StrategyFair, StrategyWorkflow, StrategyStage, StrategyStageCarry, StrategyBottleneck, StrategyBestResp, StrategyStageBottleneck}

// StagedStrategy reports whether strategy moves a plan through its
// workflows' stages (stage priority and its variants).
func StagedStrategy(strategy string) bool {
	return strategy == StrategyStage || strategy == StrategyStageCarry || strategy == StrategyStageBottleneck
}

// WorkflowSpec is one workflow of a plan: its weight (workflow priority)
// and its stages in order (stage priority).
type WorkflowSpec struct {
	Name   string      `json:"name"`
	Weight float64     `json:"weight"`
	Stages []StageSpec `json:"stages"`
}

// StageSpec is one stage of a workflow: its weight and its VMs.
type StageSpec struct {
	Name   string   `json:"name"`
	Weight float64  `json:"weight"`
	VMs    []string `json:"vms"`
}

// SpendRequest asks the broker to spend Budget of User's money over Duration
// with Strategy, on VMs or on the VMs of Workflows (a workflow descriptor).
// ID, when given, makes the request idempotent. Boost is bottleneck
// elimination's f ∈ [0, 1); HostWeights are best response's preferences
// (default 1 per host).
//
// Pace and VMShare bound how fast the plan may spend, as its user signs
// them (package mandate): by time t after its hold was placed, the bank
// lets no more than Budget·t/Pace be captured from it, and no more than
// VMShare of that for one VM; agents take no bid on a VM faster than
// VMShare·Budget/Pace. The CLI fills both from the strategy
// (strategies.PlanCaps): a strategy that spends faster than evenly, as
// stage priority does, needs a Pace shorter than Duration.
type SpendRequest struct {
	Versioned
	ID          string             `json:"id,omitempty"`
	User        string             `json:"user"`
	Budget      money.Micro        `json:"budget_micro"`
	Duration    Duration           `json:"duration"`
	VMs         []string           `json:"vms,omitempty"`
	Workflows   []WorkflowSpec     `json:"workflows,omitempty"`
	Strategy    string             `json:"strategy"`
	Boost       float64            `json:"boost,omitempty"`
	HostWeights map[string]float64 `json:"host_weights,omitempty"`
	// Pace is the shortest time the budget may be spent over, MinPace to
	// Duration; absent, Duration.
	Pace Duration `json:"pace,omitempty"`
	// VMShare is the most one VM may spend of the plan's rate, in
	// millionths (FullShare: all of it, the default when absent).
	VMShare int64 `json:"vm_share_ppm,omitempty"`
}

// MinPace is the shortest pace a request may sign: about an agent's tick,
// the finest time charges are made in.
const MinPace = time.Second

// FullShare is a VM share of all of a plan's rate, in millionths.
const FullShare = 1_000_000

// checkPace checks a signed pace: absent, or MinPace to longest.
func checkPace(p Duration, longest time.Duration) error {
	if p != 0 && (p.D() < MinPace || p.D() > longest) {
		return Errorf(ErrBadRequest, "pace must be between %s and %s, got %s", MinPace, longest, p.D())
	}
	return nil
}

func (r *SpendRequest) Validate() error {
	if r.ID != "" {
		if err := CheckID("plan id", r.ID); err != nil {
			return err
		}
	}
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	if err := checkAmount("budget", r.Budget); err != nil {
		return err
	}
	if err := CheckDuration(r.Duration); err != nil {
		return err
	}
	if len(r.VMs) > 0 && len(r.Workflows) > 0 {
		return Errorf(ErrBadRequest, "a plan names VMs or workflows, not both")
	}
	if err := checkWorkflows(r.Workflows); err != nil {
		return err
	}
	vms := r.AllVMs()
	if len(vms) == 0 || len(vms) > MaxPlanVMs {
		return Errorf(ErrBadRequest, "a plan needs 1 to %d VMs, got %d", MaxPlanVMs, len(vms))
	}
	if err := checkWorkflowVMs(r.Workflows); err != nil {
		return err
	}
	if err := checkPlanVMs(vms, len(r.Workflows) == 0); err != nil {
		return err
	}
	if r.Budget < money.Micro(len(vms)) {
		return Errorf(ErrBadRequest, "budget %s cannot fund %d VMs (at least 0.000001 each)", r.Budget, len(vms))
	}
	if !(r.Boost >= 0 && r.Boost < 1) {
		return Errorf(ErrBadRequest, "boost must be in [0, 1), got %v", r.Boost)
	}
	var hostWeights float64
	for h, w := range r.HostWeights {
		if err := CheckName("host", h); err != nil {
			return err
		}
		if err := checkWeight("host "+h, w); err != nil {
			return err
		}
		hostWeights += w
	}
	if len(r.HostWeights) > 0 && hostWeights == 0 {
		return Errorf(ErrBadRequest, "host weights are all 0: the plan could fund no host")
	}
	if err := checkPace(r.Pace, r.Duration.D()); err != nil {
		return err
	}
	if r.VMShare < 0 || r.VMShare > FullShare {
		return Errorf(ErrBadRequest, "vm share must be between 0 and %d millionths, got %d", FullShare, r.VMShare)
	}
	return r.checkStrategy()
}

// AllVMs lists the plan's VMs: VMs, or those of every stage of every
// workflow, each once.
func (r *SpendRequest) AllVMs() []string {
	if len(r.Workflows) == 0 {
		return r.VMs
	}
	var out []string
	seen := map[string]bool{}
	for _, w := range r.Workflows {
		for _, s := range w.Stages {
			for _, vm := range s.VMs {
				if !seen[vm] {
					seen[vm] = true
					out = append(out, vm)
				}
			}
		}
	}
	return out
}

// MaxPlanVMs bounds the VMs of one plan.
const MaxPlanVMs = 100_000

func checkWeight(what string, w float64) error {
	if !(w >= 0) || w > 1e9 {
		return Errorf(ErrBadRequest, "%s weight must be between 0 and 1e9, got %v", what, w)
	}
	return nil
}

// checkWorkflows checks the weights and that no workflow or stage is
// empty, nor weighs nothing: weights all 0 would hold money that no rate
// could ever spend.
func checkWorkflows(workflows []WorkflowSpec) error {
	var total float64
	for _, w := range workflows {
		total += w.Weight
		var stages float64
		for _, st := range w.Stages {
			stages += st.Weight
		}
		if len(w.Stages) > 0 && stages == 0 {
			return Errorf(ErrBadRequest, "the stages of workflow %q all weigh 0: it could spend nothing", w.Name)
		}
	}
	if len(workflows) > 0 && total == 0 {
		return Errorf(ErrBadRequest, "the workflows all weigh 0: the plan could spend nothing")
	}
	for _, w := range workflows {
		if err := checkWeight("workflow "+w.Name, w.Weight); err != nil {
			return err
		}
		if len(w.Stages) == 0 {
			return Errorf(ErrBadRequest, "workflow %q has no stages", w.Name)
		}
		for _, st := range w.Stages {
			if err := checkWeight("stage "+st.Name, st.Weight); err != nil {
				return err
			}
			if len(st.VMs) == 0 {
				return Errorf(ErrBadRequest, "stage %q of workflow %q has no VMs", st.Name, w.Name)
			}
		}
	}
	return nil
}

// checkWorkflowVMs: a VM belongs to one workflow, but the stages of a
// workflow run one after the other and may use the same VMs.
func checkWorkflowVMs(workflows []WorkflowSpec) error {
	owner := map[string]int{}
	for w, wf := range workflows {
		for _, st := range wf.Stages {
			inStage := map[string]bool{}
			for _, vm := range st.VMs {
				if inStage[vm] {
					return Errorf(ErrBadRequest, "vm %q listed twice in stage %q", vm, st.Name)
				}
				inStage[vm] = true
				if o, ok := owner[vm]; ok && o != w {
					return Errorf(ErrBadRequest, "vm %q is in two workflows", vm)
				}
				owner[vm] = w
			}
		}
	}
	return nil
}

// checkPlanVMs checks the VMs' names and, for a plan of plain VMs
// (unique), that none is listed twice.
func checkPlanVMs(vms []string, unique bool) error {
	seen := map[string]bool{}
	for _, vm := range vms {
		if err := CheckName("vm", vm); err != nil {
			return err
		}
		if seen[vm] && unique {
			return Errorf(ErrBadRequest, "vm %q listed twice", vm)
		}
		seen[vm] = true
	}
	return nil
}

// checkStrategy checks that the strategy is known and has what it needs.
func (r *SpendRequest) checkStrategy() error {
	switch r.Strategy {
	case StrategyFair, StrategyBottleneck, StrategyBestResp, StrategyDeadline:
	case StrategyWorkflow, StrategyStage, StrategyStageCarry, StrategyStageBottleneck:
		if len(r.Workflows) == 0 {
			return Errorf(ErrBadRequest, "strategy %q needs workflows (a plan file)", r.Strategy)
		}
	default:
		return Errorf(ErrBadRequest, "unknown strategy %q (known: %s)", r.Strategy, strings.Join(Strategies, ", "))
	}
	return nil
}

// SpendReply answers a SpendRequest.
type SpendReply struct {
	Plan Plan `json:"plan"`
}

// Plan states.
const (
	PlanRunning   = "running"
	PlanDone      = "done"
	PlanCancelled = "cancelled"
	PlanFailed    = "failed"
)

// PlanVM is one VM of a plan with its part of the budget.
type PlanVM struct {
	VM     string      `json:"vm"`
	Host   string      `json:"host"`
	Budget money.Micro `json:"budget_micro"`
	Rate   float64     `json:"rate_micro_per_s"`
}

// Plan is a running or finished spend plan.
type Plan struct {
	ID       string      `json:"id"`
	User     string      `json:"user"`
	Strategy string      `json:"strategy"`
	Budget   money.Micro `json:"budget_micro"`
	Duration Duration    `json:"duration"`
	Start    time.Time   `json:"start"`
	End      time.Time   `json:"end"`
	Hold     string      `json:"hold"`
	Status   string      `json:"status"`
	VMs      []PlanVM    `json:"vms"`
	// Spent, Released and Held are the bank's figures for the plan's hold
	// (wire.HoldInfo): what the agents captured so far, what went back to
	// the user, and what is still held; Spent + Released + Held = Budget
	// (the hold's amount) once the plan ended. The broker fills them from
	// the bank when it answers; Spent + Released never exceeds Budget.
	Released money.Micro `json:"released_micro"`
	Spent    money.Micro `json:"spent_micro"`
	Held     money.Micro `json:"held_micro"`
	// Figures says where Spent, Released and Held come from: "bank" (the
	// hold as the bank has it), or "estimate" (the broker's own account,
	// when the bank could not be asked; the next answer corrects it).
	Figures string `json:"figures,omitempty"`
	// Stage is the active stage of stage priority (per workflow, in order).
	Stage       []int              `json:"stage,omitempty"`
	Workflows   []WorkflowSpec     `json:"workflows,omitempty"`
	Boost       float64            `json:"boost,omitempty"`
	HostWeights map[string]float64 `json:"host_weights,omitempty"`
	// Owner is the broker replica running the plan.
	Owner string `json:"owner,omitempty"`
}

// AdjustRequest changes a running plan's budget: More adds money (a further
// hold), Less gives back part of what it has not yet spent (released when
// the plan ends). ID makes More idempotent.
type AdjustRequest struct {
	Versioned
	Plan string      `json:"plan"`
	User string      `json:"user"`
	ID   string      `json:"id"`
	More money.Micro `json:"more_micro,omitempty"`
	Less money.Micro `json:"less_micro,omitempty"`
}

func (r *AdjustRequest) Validate() error {
	if err := CheckID("plan id", r.Plan); err != nil {
		return err
	}
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	if err := CheckID("adjust id", r.ID); err != nil {
		return err
	}
	switch {
	case r.More != 0 && r.Less != 0, r.More == 0 && r.Less == 0:
		return Errorf(ErrBadRequest, "an adjustment is either more or less")
	case r.More != 0:
		return checkAmount("more", r.More)
	}
	return checkAmount("less", r.Less)
}

// AdjustPlanID is the id of the extension an adjustment makes to its
// plan's hold.
func AdjustPlanID(plan, id string) string { return plan + "/" + id }

// CancelRequest ends User's plan now and releases what it has not spent.
// ID names the request (cancelling is idempotent whatever it is).
type CancelRequest struct {
	Versioned
	Plan string `json:"plan"`
	User string `json:"user"`
	ID   string `json:"id,omitempty"`
}

func (r *CancelRequest) Validate() error {
	if err := CheckID("plan id", r.Plan); err != nil {
		return err
	}
	if r.ID != "" {
		if err := CheckID("cancel id", r.ID); err != nil {
			return err
		}
	}
	return CheckName("user", r.User)
}

// StageRequest says that Stage of User's Workflow started (the YARN
// monitor, `mrmarket stages watch`, sees its application "workflow:stage"
// run; `mrmarket stages start` says so by hand): the user's running
// stage-priority plans (StagedStrategy) with that workflow and stage move
// to it. A plan never moves back, so telling it twice, or telling it of an
// earlier stage, changes nothing. It moves no money by itself: the plan
// spends its own budget, as signed, on another stage's VMs. Workflow and
// stage are names (CheckName): a plan whose stage is named otherwise moves
// on only when the stage before it goes idle.
type StageRequest struct {
	Versioned
	User     string `json:"user"`
	Workflow string `json:"workflow"`
	Stage    string `json:"stage"`
}

func (r *StageRequest) Validate() error {
	if err := CheckName("user", r.User); err != nil {
		return err
	}
	if err := CheckName("workflow", r.Workflow); err != nil {
		return err
	}
	return CheckName("stage", r.Stage)
}

// StageReply names the plans a StageRequest moved, by id, sorted. It is
// empty, not an error, when none did: no running stage-priority plan of
// the user's has that workflow and stage, or each is at it or past it
// already — a monitor tells of every application it sees, most of them
// no plan's.
type StageReply struct {
	Plans []string `json:"plans"`
}

// PlansRequest lists plans, of one user when User is set.
type PlansRequest struct {
	Versioned
	User string `json:"user,omitempty"`
}

func (r *PlansRequest) Validate() error {
	if r.User == "" {
		return nil
	}
	return CheckName("user", r.User)
}

// PlansReply answers a PlansRequest.
type PlansReply struct {
	Plans []Plan `json:"plans"`
}

// PriceRequest asks for host prices, of one host when Host is set.
type PriceRequest struct {
	Versioned
	Host string `json:"host,omitempty"`
}

func (r *PriceRequest) Validate() error {
	if r.Host == "" {
		return nil
	}
	return CheckName("host", r.Host)
}

// HostPrice is one host's price as the broker last heard it.
type HostPrice struct {
	Host    string    `json:"host"`
	Price   float64   `json:"price_micro_per_s"`
	VMs     int       `json:"vms"`
	Funded  int       `json:"funded"`
	Updated time.Time `json:"updated"`
	// Retired: the host's agent key was revoked (not rotated): the host is
	// down, its VMs are offered to nobody and no bid goes there.
	Retired bool `json:"retired,omitempty"`
	// Stale: no state from the host's agent for several of its ticks; what
	// is shown of it is as of Updated.
	Stale bool `json:"stale,omitempty"`
}

// PriceReply answers a PriceRequest, hosts sorted by id.
type PriceReply struct {
	Hosts []HostPrice `json:"hosts"`
}

// VMsRequest lists VMs, filtered by owner and host when set. A user lists
// only its own (leaving Owner empty asks for them).
type VMsRequest struct {
	Versioned
	Owner string `json:"owner,omitempty"`
	Host  string `json:"host,omitempty"`
}

func (r *VMsRequest) Validate() error {
	if r.Owner != "" {
		if err := CheckName("owner", r.Owner); err != nil {
			return err
		}
	}
	if r.Host != "" {
		return CheckName("host", r.Host)
	}
	return nil
}

// HostVM is a VM with the host it runs on.
type HostVM struct {
	Host string `json:"host"`
	VMState
	// Resources is how the VM's host delivers each resource's shares.
	Resources []ResourceMode `json:"resources,omitempty"`
	// Updated is the time of the host's state this is from; Stale says
	// its agent has been silent since for several of its ticks, so the
	// rate, share and use shown are as of then (HostPrice.Stale).
	Updated time.Time `json:"updated,omitzero"`
	Stale   bool      `json:"stale,omitempty"`
}

// Delivery is how v's host delivers its share of resources (the first
// names the mode) and, under a throttle, each one's cap now in MiB/s (2^20 bytes); nil
// caps when one has none yet. Whoever shows a share shows this with it, so
// no one is shown a share nothing enforces.
func (v HostVM) Delivery(resources ...string) (mode string, caps []float64) {
	mode = ModeNone
	for _, r := range v.Resources {
		if r.Resource == resources[0] {
			mode = r.Mode
		}
	}
	if mode != ModeThrottle {
		return mode, nil
	}
	for _, r := range resources {
		c, ok := v.Caps[r]
		if !ok {
			return mode, nil
		}
		caps = append(caps, c)
	}
	return mode, caps
}

// VMsReply answers a VMsRequest, sorted by host then VM. To a user, VMs
// are its own and Others, by host, what it may see of everyone else's;
// the admin's and the brokers' answers list every VM and no Others.
type VMsReply struct {
	VMs    []HostVM   `json:"vms"`
	Others []OtherVMs `json:"others,omitempty"`
}

// OtherVMs is what a user sees of the other users' VMs on a host: how
// many there are, and their rates and shares combined. The host's price
// is the sum of every rate on it and is public, so this tells a user
// nothing the price does not: not whose VMs they are, their names, plans,
// holds, budgets or charges.
type OtherVMs struct {
	Host  string  `json:"host"`
	VMs   int     `json:"vms"`
	Rate  float64 `json:"rate_micro_per_s"`
	Share float64 `json:"share"`
	// Updated and Stale as in HostVM.
	Updated time.Time `json:"updated,omitzero"`
	Stale   bool      `json:"stale,omitempty"`
}

// What-if queries of the prediction strategy.
const (
	WhatIfPerformance = "performance" // given spending and guarantee
	WhatIfPrice       = "price"       // given performance and guarantee
	WhatIfGuarantee   = "guarantee"   // given spending and performance
)

// PredictRequest asks a what-if question about Host from its price history:
// given two of Spending (a rate, micro-credits per second), Performance (a
// share of the host, 0..1) and Guarantee (a probability, 0..1), the third.
type PredictRequest struct {
	Versioned
	Host        string  `json:"host"`
	Query       string  `json:"query"`
	Spending    float64 `json:"spending_micro_per_s,omitempty"`
	Performance float64 `json:"performance,omitempty"`
	Guarantee   float64 `json:"guarantee,omitempty"`
}

func (r *PredictRequest) Validate() error {
	if err := CheckName("host", r.Host); err != nil {
		return err
	}
	in01 := func(what string, v float64) error {
		if !(v > 0 && v < 1) {
			return Errorf(ErrBadRequest, "%s must be between 0 and 1 (exclusive), got %v", what, v)
		}
		return nil
	}
	pos := func(what string, v float64) error {
		if !(v > 0) || v > 1e15 {
			return Errorf(ErrBadRequest, "%s must be a positive rate, got %v", what, v)
		}
		return nil
	}
	switch r.Query {
	case WhatIfPerformance:
		return errors.Join(pos("spending", r.Spending), in01("guarantee", r.Guarantee))
	case WhatIfPrice:
		return errors.Join(in01("performance", r.Performance), in01("guarantee", r.Guarantee))
	case WhatIfGuarantee:
		return errors.Join(pos("spending", r.Spending), in01("performance", r.Performance))
	}
	return Errorf(ErrBadRequest, "unknown what-if query %q (performance, price, guarantee)", r.Query)
}

// PredictReply answers with all three quantities and the price statistics
// behind them.
type PredictReply struct {
	Host         string  `json:"host"`
	Observations int64   `json:"observations"`
	MeanPrice    float64 `json:"mean_price_micro_per_s"`
	StdDevPrice  float64 `json:"stddev_price_micro_per_s"`
	Spending     float64 `json:"spending_micro_per_s"`
	Performance  float64 `json:"performance"`
	Guarantee    float64 `json:"guarantee"`
}
