package daemon

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/trellis-run/trellis/runtime/llm"
	"github.com/trellis-run/trellis/runtime/provider"
	"github.com/trellis-run/trellis/runtime/session"
	"github.com/trellis-run/trellis/runtime/store"
)

// The provider configuration is what sessions open their providers through.
var _ session.Providers = (*provider.Service)(nil)

// newProviders builds the model provider configuration: vendors configured
// through provider.configure (settings in the store, keys under
// <home>/secrets) or detected from OPENAI_API_KEY, OPENAI_BASE_URL and
// ANTHROPIC_API_KEY. The default is the --provider spec ($TRELLIS_PROVIDER,
// e.g. "fake:/path/script.json") when given, else the saved or detected real
// provider, else the offline fake provider with its built-in demo script.
//
// On a PostgreSQL store the keys are kept in the database instead, sealed
// with the secrets key every daemon shares (--secrets-key-file or
// $TRELLIS_SECRETS_KEY), so that a key configured through one daemon is used
// by all of them.
//
// The limits on each vendor's requests (--provider-concurrency,
// --provider-rpm, the vendor's rate-limit headers) are kept in the store:
// every daemon sharing it shares them, and a slot of a daemon killed
// mid-call comes back after --lease.
func newProviders(ctx context.Context, cfg Config, st store.Store, log *slog.Logger) (*provider.Service, error) {
	id, err := loadDaemonID(cfg.Home)
	if err != nil {
		return nil, err
	}
	opts := provider.Options{Home: cfg.Home, Settings: st, Spec: cfg.Provider, Log: log,
		Limits:     llm.Limits{Concurrency: cfg.ProviderConcurrency, PerMinute: cfg.ProviderRPM},
		LimitStore: st, DaemonID: id, Lease: cfg.Lease}
	if cfg.storeKind() == "postgres" {
		key, err := provider.LoadSecretsKey(cfg.SecretsKeyFile, nil)
		if err != nil {
			return nil, err
		}
		opts.SharedKeys, opts.SecretsKey = true, key
		if key == nil {
			log.Warn("no secrets key (--secrets-key-file or $" + provider.SecretsKeyEnv + "): provider API keys cannot be stored in the shared database; keys from the environment still work")
		}
	}
	p, err := provider.New(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("model providers: %w", err)
	}
	return p, nil
}
