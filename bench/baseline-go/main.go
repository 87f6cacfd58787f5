// A controller-runtime manager that does what the scale benchmark asks of gatehouse, the
// way Go controllers of its kind do it, so that gatehouse's memory, sync time and API
// requests can be printed beside a peer's measured in the same run (bench/scale.ts).
//
// Written for the benchmark only; never shipped. See README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap/zapcore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

var probes = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "baseline_probes_total",
	Help: "Node lists the checks made.",
})

func main() {
	metrics.Registry.MustRegister(probes)
	probeAddr := flag.String("health-probe-bind-address", "127.0.0.1:8081", "serves /readyz once the Node cache has synced")
	metricsAddr := flag.String("metrics-bind-address", "127.0.0.1:8080", "serves /metrics (baseline_probes_total)")
	checks := flag.Int("checks", 1000, "how many periodic Node checks to run")
	nodes := flag.Int("nodes", 5000, "check i selects the node named by -node-name with i modulo this")
	nodeName := flag.String("node-name", "scale-%05d", "format of the node names the checks select")
	labelKey := flag.String("label", "kubernetes.io/hostname", "the label each check selects its node by")
	interval := flag.Duration("interval", time.Minute, "each check's interval")
	leaseNamespace := flag.String("lease-namespace", "default", "namespace of the leader election Lease")
	flag.Parse()
	// Errors only: its readiness endpoint, polled until the cache syncs, logs every "not yet".
	ctrl.SetLogger(zap.New(zap.Level(zapcore.ErrorLevel)))

	// -kubeconfig is controller-runtime's own flag; its client-side rate limits (20/s,
	// bursts of 30) are the ones every controller-runtime program gets.
	mgr, err := ctrl.NewManager(ctrl.GetConfigOrDie(), ctrl.Options{
		Metrics:                 metricsserver.Options{BindAddress: *metricsAddr},
		HealthProbeBindAddress:  *probeAddr,
		LeaderElection:          true,
		LeaderElectionID:        "gatehouse-bench-baseline",
		LeaderElectionNamespace: *leaseNamespace,
		// Renewed every 2 s as by default (the same requests), but a renewal may take 100 s
		// before leadership is lost and the manager exits: the benchmark's machine is shared.
		LeaseDuration: ptr(120 * time.Second),
		RenewDeadline: ptr(100 * time.Second),
		// Given up on SIGTERM, so that the next start (the benchmark makes several) leads
		// at once instead of waiting out the 120 s above for its checks to begin.
		LeaderElectionReleaseOnCancel: true,
	})
	if err != nil {
		fail(err)
	}

	// Full Node objects in the manager's cache, as tuppr and system-upgrade-controller keep
	// them (no transform: managedFields, images and volumes included).
	ctx := ctrl.SetupSignalHandler()
	if _, err := mgr.GetCache().GetInformer(ctx, &corev1.Node{}); err != nil {
		fail(err)
	}
	var synced atomic.Bool
	if err := mgr.AddReadyzCheck("node-cache", func(*http.Request) error {
		if !synced.Load() {
			return errors.New("node cache not synced")
		}
		return nil
	}); err != nil {
		fail(err)
	}
	if err := mgr.Add(syncWatcher{cache: mgr.GetCache(), synced: &synced}); err != nil {
		fail(err)
	}

	// The checks: each LISTs the Nodes its label selects and counts the Ready ones, as
	// tuppr's health checks list objects of any kind — through the manager's client,
	// which reads unstructured objects from the API server, not from the cache.
	if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
		for i := range *checks {
			go runCheck(ctx, mgr.GetClient(), *labelKey, fmt.Sprintf(*nodeName, i%*nodes), *interval)
		}
		<-ctx.Done()
		return nil
	})); err != nil {
		fail(err)
	}
	if err := mgr.Start(ctx); err != nil {
		fail(err)
	}
}

// runCheck probes on its interval: the first within a second (a thousand checks do not
// start in the same instant), then every interval, up to 10% later.
func runCheck(ctx context.Context, c client.Client, key, value string, interval time.Duration) {
	wait := time.Duration(rand.Float64() * float64(time.Second))
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		probe(ctx, c, key, value, interval)
		wait = interval + time.Duration(rand.Float64()*0.1*float64(interval))
	}
}

func probe(ctx context.Context, c client.Client, key, value string, timeout time.Duration) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	list := &unstructured.UnstructuredList{}
	list.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "NodeList"})
	probes.Inc()
	if err := c.List(ctx, list, client.MatchingLabels{key: value}); err != nil {
		ctrl.Log.Error(err, "check failed", "selector", key+"="+value)
		return
	}
	ready := 0
	for _, node := range list.Items {
		conditions, _, _ := unstructured.NestedSlice(node.Object, "status", "conditions")
		for _, c := range conditions {
			if m, ok := c.(map[string]any); ok && m["type"] == "Ready" && m["status"] == "True" {
				ready++
			}
		}
	}
	_ = ready
}

// syncWatcher says when the Node cache has synced. It runs on every replica, leader or not
// (a RunnableFunc would wait for leadership): readiness is the cache's, as gatehouse's
// /readyz is, and a start must not be timed by how long the last one's lease lingers.
type syncWatcher struct {
	cache  cache.Cache
	synced *atomic.Bool
}

func (w syncWatcher) Start(ctx context.Context) error {
	w.synced.Store(w.cache.WaitForCacheSync(ctx))
	<-ctx.Done()
	return nil
}

func (syncWatcher) NeedLeaderElection() bool { return false }

func ptr[T any](v T) *T { return &v }

func fail(err error) {
	fmt.Fprintln(os.Stderr, err)
	os.Exit(1)
}
