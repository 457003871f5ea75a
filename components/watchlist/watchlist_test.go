package watchlist

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func TestInstallTurnsWatchListOnAndLeavesTheRest(t *testing.T) {
	informerRV := clientfeatures.FeatureGates().Enabled(clientfeatures.InformerResourceVersion)
	g := Install()
	if !clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Error("WatchListClient off after Install")
	}
	if clientfeatures.FeatureGates().Enabled(clientfeatures.InformerResourceVersion) != informerRV {
		t.Error("Install changed another gate")
	}
	g.Set(false)
	if clientfeatures.FeatureGates().Enabled(clientfeatures.WatchListClient) {
		t.Error("WatchListClient on after Set(false)")
	}
}

// An informer started after Install asks for a watch that streams the initial state, not a list.
func TestInformersStreamTheirInitialState(t *testing.T) {
	Install()
	first := make(chan url.Values, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case first <- r.URL.Query():
		default:
		}
		http.Error(w, "test server", http.StatusServiceUnavailable)
	}))
	defer srv.Close()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go informers.NewSharedInformerFactory(cs, 0).Core().V1().Pods().Informer().RunWithContext(ctx)
	select {
	case q := <-first:
		if q.Get("watch") != "true" || q.Get("sendInitialEvents") != "true" {
			t.Errorf("the informer's first request %v: want a watch with sendInitialEvents", q)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the informer made no request")
	}
}
