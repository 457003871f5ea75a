package addons

import (
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/components/spec"
)

// TeamsPriorityLevel names the API priority level, and its flow schema, of the teams' requests;
// PlatformFlowSchema the schema that keeps the platform's own callers out of it; JoinsPriorityLevel
// the level, and schema, of the join token's.
const (
	TeamsPriorityLevel = "clusterforge-teams"
	PlatformFlowSchema = "clusterforge-platform"
	JoinsPriorityLevel = "clusterforge-joins"
)

// Concurrency shares of TeamsPriorityLevel, beside those of Kubernetes' default levels: the teams
// together never hold more than a bounded part of the apiservers' seats.
const (
	teamsConcurrencyShares = 30
	// teamsMatchingPrecedence comes after every schema of Kubernetes' defaults that names the
	// system's callers (the nodes, the controllers, kube-system's service accounts: below 1,000)
	// and before its catch-alls (service-accounts 9,000, global-default 9,900);
	// platformMatchingPrecedence before it.
	teamsMatchingPrecedence    = 8000
	platformMatchingPrecedence = 7000
	joinsMatchingPrecedence    = 6000
	// joinsConcurrencyShares hold a pool's join step (a request and a few reads a node) and keep
	// a flood of join requests, made with a leaked token, from taking more.
	joinsConcurrencyShares = 10
	// platformPriorityLevel is Kubernetes' own level of the controllers (workload-high).
	platformPriorityLevel = "workload-high"
)

// teamFairness gives the teams' requests a priority level of their own: every request made in a
// namespace by a caller no earlier schema claims, queued fairly by namespace, so one team's
// storm waits in its own queues and neither starves another team nor the platform's controllers.
// The join tokens' requests get another, so a loop of join requests stalls joins alone, and
// within it each pool's token is a flow of its own: a token taken from one pool's machines
// delays that pool's joins, not another's.
// Requests across namespaces or of cluster-scoped objects are no team's: edit grants none.
func teamFairness(*spec.Cluster) []Object {
	every := []string{"*"}
	limited := func(name string, shares int32, queuing flowcontrolv1.QueuingConfiguration) *flowcontrolv1.PriorityLevelConfiguration {
		return &flowcontrolv1.PriorityLevelConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: flowcontrolv1.PriorityLevelConfigurationSpec{Type: flowcontrolv1.PriorityLevelEnablementLimited,
				Limited: &flowcontrolv1.LimitedPriorityLevelConfiguration{
					NominalConcurrencyShares: ptr(shares),
					// Idle seats lent to others, none borrowed: the share is a ceiling.
					LendablePercent:       ptr(int32(50)),
					BorrowingLimitPercent: ptr(int32(0)),
					LimitResponse:         flowcontrolv1.LimitResponse{Type: flowcontrolv1.LimitResponseTypeQueue, Queuing: &queuing},
				}},
		}
	}
	schema := func(name, level string, precedence int32, distinguisher flowcontrolv1.FlowDistinguisherMethodType, rule flowcontrolv1.PolicyRulesWithSubjects) *flowcontrolv1.FlowSchema {
		f := &flowcontrolv1.FlowSchema{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: flowcontrolv1.FlowSchemaSpec{
			PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: level},
			MatchingPrecedence:         precedence, Rules: []flowcontrolv1.PolicyRulesWithSubjects{rule}}}
		if distinguisher != "" {
			f.Spec.DistinguisherMethod = &flowcontrolv1.FlowDistinguisherMethod{Type: distinguisher}
		}
		return f
	}
	everythingAnywhere := []flowcontrolv1.ResourcePolicyRule{{Verbs: every, APIGroups: every, Resources: every, Namespaces: every, ClusterScope: true}}
	return []Object{
		// Shuffle sharding: a flood fills its flow's hand of queues, and another pool's flow, queued
		// in the shortest of its own hand, shares the whole hand only by chance (one in 635,376).
		limited(JoinsPriorityLevel, joinsConcurrencyShares, flowcontrolv1.QueuingConfiguration{Queues: 64, HandSize: 4, QueueLengthLimit: 100}),
		// Everything a join token asks, whatever it names: it may only create and read join requests.
		schema(JoinsPriorityLevel, JoinsPriorityLevel, joinsMatchingPrecedence, flowcontrolv1.FlowDistinguisherMethodByUserType, flowcontrolv1.PolicyRulesWithSubjects{
			Subjects:         []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: pki.BootstrapGroup}}},
			ResourceRules:    everythingAnywhere,
			NonResourceRules: []flowcontrolv1.NonResourcePolicyRule{{Verbs: every, NonResourceURLs: every}},
		}),
		limited(TeamsPriorityLevel, teamsConcurrencyShares, flowcontrolv1.QueuingConfiguration{Queues: 128, HandSize: 6, QueueLengthLimit: 50}),
		// The platform's callers that no default schema names: the CSR approver renews its lease
		// and reads in kube-system, Prometheus lists in every namespace.
		schema(PlatformFlowSchema, platformPriorityLevel, platformMatchingPrecedence, flowcontrolv1.FlowDistinguisherMethodByUserType, flowcontrolv1.PolicyRulesWithSubjects{
			Subjects: []flowcontrolv1.Subject{
				{Kind: flowcontrolv1.SubjectKindUser, User: &flowcontrolv1.UserSubject{Name: pki.CSRApproverUser}},
				{Kind: flowcontrolv1.SubjectKindServiceAccount, ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: MonitoringNamespace, Name: "*"}},
			},
			ResourceRules: everythingAnywhere,
		}),
		schema(TeamsPriorityLevel, TeamsPriorityLevel, teamsMatchingPrecedence, flowcontrolv1.FlowDistinguisherMethodByNamespaceType, flowcontrolv1.PolicyRulesWithSubjects{
			Subjects:      []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindGroup, Group: &flowcontrolv1.GroupSubject{Name: "system:authenticated"}}},
			ResourceRules: []flowcontrolv1.ResourcePolicyRule{{Verbs: every, APIGroups: every, Resources: every, Namespaces: every}},
		}),
	}
}
