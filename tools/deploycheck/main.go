// Command deploycheck checks the deployment files of deploy/ without a
// container engine or a Kubernetes cluster (CI has neither):
//
//	deploycheck compose -secrets DIR [-trellisd BIN] FILE
//	deploycheck manifests [-secrets-mount DIR -trellisd BIN] FILE...
//
// compose loads a compose file as docker compose would (compose-go, with
// the Compose Specification's schema), with its secret files taken from
// DIR, and checks what the cluster needs of it: every daemon healthy by its
// own check, a home volume of its own, an --advertise name its cluster
// certificate is made for, every file flag given by a secret, a grace
// period that covers the daemon's drain, and a load balancer in front of
// every daemon on both ports.
//
// manifests decodes every object of rendered Kubernetes manifests (helm
// template's output) strictly into the k8s.io/api types: an unknown or a
// duplicate field is an error, as the API server's strict field validation
// would make it. kubeconform would check against the API's JSON schemas,
// but those are downloaded from GitHub, which CI cannot reach; the typed
// decode is the stand-in. It then checks the daemons' pods: readiness on
// /ready and liveness on /health, non-root, read-only root, no capabilities, a grace period that
// covers the drain, a PodDisruptionBudget and Services that select them.
//
// With -trellisd, each daemon's command line is also given to `trellisd
// config check` (its secret files mapped to local ones), which refuses a
// flag that does not exist and checks the files as the daemon would.
package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: deploycheck compose -secrets DIR [-trellisd BIN] FILE | deploycheck manifests [-secrets-mount DIR -trellisd BIN] FILE...")
		os.Exit(2)
	}
	var err error
	switch cmd := os.Args[1]; cmd {
	case "compose":
		err = composeCmd(os.Args[2:])
	case "manifests":
		err = manifestsCmd(os.Args[2:])
	default:
		err = fmt.Errorf("unknown command %q: want compose or manifests", cmd)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "deploycheck:", err)
		os.Exit(1)
	}
}

func composeCmd(args []string) error {
	fs := flag.NewFlagSet("compose", flag.ExitOnError)
	secrets := fs.String("secrets", "", "directory holding the compose file's secret files (deploy/compose/gen-secrets.sh makes them)")
	trellisd := fs.String("trellisd", "", "a trellisd binary: give each daemon's command line to its config check")
	_ = fs.Parse(args)
	if fs.NArg() != 1 || *secrets == "" {
		return errors.New("compose: want -secrets DIR and one compose file")
	}
	p, err := checkCompose(fs.Arg(0), *secrets)
	if err != nil {
		return err
	}
	if *trellisd != "" {
		if err := p.configCheck(*trellisd); err != nil {
			return err
		}
	}
	fmt.Printf("%s: %d daemons, %d secrets, load balancer %s: ok\n", fs.Arg(0), len(p.daemons), len(p.project.Secrets), p.balancer)
	return nil
}

func manifestsCmd(args []string) error {
	fs := flag.NewFlagSet("manifests", flag.ExitOnError)
	mount := fs.String("secrets-mount", "", "directory standing in for the pods' /run/secrets (with -trellisd)")
	trellisd := fs.String("trellisd", "", "a trellisd binary: give the daemons' command line to its config check")
	_ = fs.Parse(args)
	if fs.NArg() == 0 {
		return errors.New("manifests: want rendered manifest files")
	}
	for _, file := range fs.Args() {
		b, err := os.ReadFile(file)
		if err != nil {
			return err
		}
		m, err := checkManifests(b)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if *trellisd != "" {
			if *mount == "" {
				return errors.New("manifests: -trellisd needs -secrets-mount")
			}
			if err := m.configCheck(*trellisd, *mount); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
		}
		fmt.Printf("%s: %s\n", file, m.summary())
	}
	return nil
}

// flagValue returns the value of --name in a command line (--name VALUE or
// --name=VALUE) and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
		if a == "--"+name {
			if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
				return args[i+1], true
			}
			return "", true
		}
	}
	return "", false
}
