package calico

import (
	"context"
	"errors"
	"fmt"

	calicoclient "github.com/projectcalico/api/pkg/client/clientset_generated/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
)

// StoreClients are the clients NewPoolStore may use.
type StoreClients struct {
	// Discovery tells which APIs are served (required).
	Discovery discovery.DiscoveryInterface
	// Calico is used when projectcalico.org/v3 is served (required then).
	Calico calicoclient.Interface
	// Dynamic is used for crd.projectcalico.org/v1 (required then).
	Dynamic dynamic.Interface
}

// ServedAPI reports which Calico IPPool API the cluster serves, preferring
// projectcalico.org/v3. It returns ErrNoCalicoAPI when neither is.
func ServedAPI(ctx context.Context, disco discovery.DiscoveryInterface) (API, error) {
	if disco == nil {
		return "", fmt.Errorf("calico: no discovery client given")
	}
	for _, c := range []struct {
		api API
		gv  string
	}{{APIProjectCalicoV3, IPPoolsV3.GroupVersion().String()}, {APICRDV1, IPPoolsV1.GroupVersion().String()}} {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		list, err := discovery.ToServerResourcesInterfaceWithContext(disco).ServerResourcesForGroupVersionWithContext(ctx, c.gv)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			// An aggregated API whose server is down answers 503: say so
			// rather than silently falling back to the unvalidated path.
			return "", fmt.Errorf("discovering %s: %w", c.gv, err)
		}
		for _, r := range list.APIResources {
			if r.Name == "ippools" {
				return c.api, nil
			}
		}
	}
	return "", ErrNoCalicoAPI
}

// NewPoolStore returns a V3Store when discovery shows projectcalico.org/v3
// ippools are served, otherwise a CRDStore over crd.projectcalico.org/v1.
func NewPoolStore(ctx context.Context, c StoreClients) (PoolStore, error) {
	api, err := ServedAPI(ctx, c.Discovery)
	if err != nil {
		return nil, err
	}
	switch api {
	case APIProjectCalicoV3:
		if c.Calico == nil {
			return nil, errors.New("calico: projectcalico.org/v3 is served but StoreClients.Calico is nil; pass a clientset from github.com/projectcalico/api")
		}
		return NewV3Store(c.Calico), nil
	default:
		if c.Dynamic == nil {
			return nil, errors.New("calico: crd.projectcalico.org/v1 is served but StoreClients.Dynamic is nil")
		}
		return NewCRDStore(c.Dynamic), nil
	}
}
