package arm

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/clusterforge/clusterforge/components/azurecloud"
	"github.com/clusterforge/clusterforge/components/pki"
	"github.com/clusterforge/clusterforge/test/standin"
	"github.com/clusterforge/clusterforge/test/standin/entra"
)

// Inventory is what the stand-in holds at start: the resource group's scale sets and VMs.
type Inventory struct {
	ScaleSets []ScaleSet `json:"scaleSets"`
	VMs       []VM       `json:"vms"`
}

// Main serves the stand-in: `arm --listen=… --cert=… --key=… --subscription=… --resource-group=…
// --location=… --tenant=… --token-key=… --inventory=… --assignments=… --calls=… [--speedup=…]
// [--health-port=… --health-path=… --health-probes=…] [--machines=…]`.
func Main(args []string) error {
	fs := flag.NewFlagSet("arm", flag.ContinueOnError)
	listen := fs.String("listen", "", "host:port to serve HTTPS on")
	cert := fs.String("cert", "", "serving certificate (PEM)")
	key := fs.String("key", "", "serving key (PEM)")
	s := &Server{}
	fs.StringVar(&s.Subscription, "subscription", "", "the subscription id")
	fs.StringVar(&s.ResourceGroup, "resource-group", "", "the resource group")
	fs.StringVar(&s.Location, "location", "", "the region")
	tenant := fs.String("tenant", "", "the Entra ID tenant whose access tokens are taken")
	authority := fs.String("authority-host", azurecloud.Public.AuthorityHost, "Entra ID's host, named in a refusal's WWW-Authenticate")
	tokenKey := fs.String("token-key", "", "Entra ID's token signing key (the stand-in's, entra.WriteSigningKey)")
	inventory := fs.String("inventory", "", "JSON file: the scale sets and VMs (Inventory)")
	assignments := fs.String("assignments", "", "JSON file: the role assignments ([]Assignment)")
	calls := fs.String("calls", "", "file each request is appended to, one JSON line")
	wire := fs.String("wire", "", "file each exchange of --wire-agent's clients is appended to, bodies and all (standin.Exchange)")
	wireAgent := fs.String("wire-agent", "", "what a recorded client's User-Agent holds")
	fs.Float64Var(&s.Speedup, "speedup", 1, "run the model's time this many times faster than real time: latencies, windows and grace periods")
	var health HealthExtension
	fs.IntVar(&health.Port, "health-port", 0, "the Application Health extension's port on each instance of a scale set with repairs (0: no repairs run)")
	fs.StringVar(&health.RequestPath, "health-path", "/", "the extension's request path")
	fs.IntVar(&health.NumberOfProbes, "health-probes", 1, "failed probes in a row that make an instance unhealthy")
	machines := fs.String("machines", "", "unix socket of the process holding the machines behind the instances (ServeMachines); none: the model alone")
	if err := fs.Parse(args); err != nil {
		return err
	}
	signing, err := entra.ReadSigningKey(*tokenKey)
	if err != nil {
		return fmt.Errorf("arm: --token-key: %w", err)
	}
	pub := &signing.PublicKey
	s.Auth = &Authority{Tenant: *tenant, AuthorityHost: *authority, TokenKey: func(kid string) (*rsa.PublicKey, error) {
		if kid != pki.KeyID(pub) {
			return nil, fmt.Errorf("no key %q in the tenant's key set", kid)
		}
		return pub, nil
	}}
	var inv Inventory
	if err := readJSON(*inventory, &inv); err != nil {
		return err
	}
	if err := readJSON(*assignments, &s.Auth.Assignments); err != nil {
		return err
	}
	for _, ss := range inv.ScaleSets {
		if err := ss.Repairs.Check(); err != nil {
			return fmt.Errorf("arm: %s: scale set %s: %w", *inventory, ss.Name, err)
		}
		s.AddScaleSet(ss)
	}
	for _, vm := range inv.VMs {
		s.AddVM(vm)
	}
	s.Record = standin.Recorder[Call](*calls, "")
	if *machines != "" {
		s.Machines = RemoteMachines{Socket: *machines}
	}
	if health.Port != 0 {
		s.Health = ExtensionHealth(health)
		go s.RunRepairs(context.Background())
	}
	return standin.Serve(*listen, standin.RecordWire(s, *wire, *wireAgent), *cert, *key, func() {
		log.Printf("Resource Manager of subscription %s, resource group %s: %d scale sets, %d VMs, on https://%s", s.Subscription, s.ResourceGroup, len(inv.ScaleSets), len(inv.VMs), *listen)
	})
}

func readJSON(file string, v any) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	return nil
}
