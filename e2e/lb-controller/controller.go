package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	discoverylisters "k8s.io/client-go/listers/discovery/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// Config says which Services the controller serves and where their addresses come from.
type Config struct {
	// Pool is the range addresses are assigned from.
	Pool *Pool
	// Interface receives every assigned address.
	Interface *Interface
	// AddressAnnotation names a Service annotation with a comma-separated list of requested
	// addresses (MetalLB's metallb.io/loadBalancerIPs); it wins over spec.loadBalancerIP.
	AddressAnnotation string
	Log               *slog.Logger
}

// Controller assigns addresses to Services of type LoadBalancer (without a loadBalancerClass),
// writes them to status.loadBalancer.ingress and forwards every Service port from them.
type Controller struct {
	cfg       Config
	client    kubernetes.Interface
	services  corelisters.ServiceLister
	slices    discoverylisters.EndpointSliceLister
	queue     workqueue.TypedRateLimitingInterface[string]
	factory   informers.SharedInformerFactory
	hasSynced []cache.InformerSynced

	mu       sync.Mutex
	serving  map[string]map[listenKey]Forwarder // Service key -> its forwarders
	assigned map[string][]netip.Addr            // Service key -> addresses on the interface
}

// fieldManager is the name this controller writes Service status under.
const fieldManager = "turna-lb"

type listenKey struct {
	addr     netip.AddrPort
	protocol corev1.Protocol
	portName string
}

// NewController wires the informers; Run starts them.
func NewController(client kubernetes.Interface, cfg Config) *Controller {
	factory := informers.NewSharedInformerFactory(client, 0)
	svcInformer := factory.Core().V1().Services()
	sliceInformer := factory.Discovery().V1().EndpointSlices()
	c := &Controller{
		cfg:      cfg,
		client:   client,
		services: svcInformer.Lister(),
		slices:   sliceInformer.Lister(),
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "loadbalancer"}),
		factory:  factory,
		serving:  map[string]map[listenKey]Forwarder{},
		assigned: map[string][]netip.Addr{},
	}
	enqueue := func(obj any) {
		if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
			c.queue.Add(key)
		}
	}
	_, _ = svcInformer.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, obj any) { enqueue(obj) },
		DeleteFunc: enqueue,
	})
	c.hasSynced = []cache.InformerSynced{svcInformer.Informer().HasSynced, sliceInformer.Informer().HasSynced}
	return c
}

// Run serves until ctx ends, then stops forwarding and removes the addresses it added.
func (c *Controller) Run(ctx context.Context) error {
	defer c.queue.ShutDown()
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), c.hasSynced...) {
		return errors.New("informer caches did not sync")
	}
	c.cfg.Log.Info("caches synced; serving LoadBalancer Services")
	// Every Service is queued by the initial list; addresses left on the interface by an earlier
	// run that no Service claims any more are removed once those have been handled.
	go c.removeStaleAddressesAfterSync(ctx)
	go wait.UntilWithContext(ctx, func(ctx context.Context) {
		for c.processNext(ctx) {
		}
	}, time.Second)
	<-ctx.Done()
	c.stopAll()
	return nil
}

func (c *Controller) processNext(ctx context.Context) bool {
	key, quit := c.queue.Get()
	if quit {
		return false
	}
	defer c.queue.Done(key)
	if err := c.reconcile(ctx, key); err != nil {
		c.cfg.Log.Warn("reconcile failed; retrying", "service", key, "error", err)
		c.queue.AddRateLimited(key)
		return true
	}
	c.queue.Forget(key)
	return true
}

// reconcile brings one Service's address, interface address, forwarders and status in line.
func (c *Controller) reconcile(ctx context.Context, key string) error {
	ns, name, err := cache.SplitMetaNamespaceKey(key)
	if err != nil {
		return nil
	}
	svc, err := c.services.Services(ns).Get(name)
	if apierrors.IsNotFound(err) || err == nil && !c.serves(svc) {
		if c.release(key) {
			c.requeuePending()
		}
		if svc != nil {
			return c.writeStatus(ctx, svc, nil)
		}
		return nil
	}
	if err != nil {
		return err
	}

	requested, err := c.requestedAddresses(svc)
	if err != nil {
		c.cfg.Log.Warn("unusable address request", "service", key, "error", err)
		c.release(key)
		return c.writeStatus(ctx, svc, nil)
	}
	addrs, err := c.cfg.Pool.Assign(key, requested, statusAddresses(svc))
	if err != nil {
		// A cloud load balancer leaves such a Service pending; so does this one.
		c.cfg.Log.Warn("no address for service", "service", key, "requested", requested, "error", err)
		c.release(key)
		return c.writeStatus(ctx, svc, nil)
	}
	if err := c.serve(key, svc, addrs); err != nil {
		return err
	}
	return c.writeStatus(ctx, svc, addrs)
}

func (c *Controller) serves(svc *corev1.Service) bool {
	return svc.Spec.Type == corev1.ServiceTypeLoadBalancer && svc.Spec.LoadBalancerClass == nil && svc.DeletionTimestamp == nil
}

// requestedAddresses reads the address annotation, else spec.loadBalancerIP.
func (c *Controller) requestedAddresses(svc *corev1.Service) ([]netip.Addr, error) {
	raw := svc.Spec.LoadBalancerIP
	if v, ok := svc.Annotations[c.cfg.AddressAnnotation]; ok && c.cfg.AddressAnnotation != "" {
		raw = v
	}
	var out []netip.Addr
	for _, s := range strings.Split(raw, ",") {
		if s = strings.TrimSpace(s); s == "" {
			continue
		}
		a, err := netip.ParseAddr(s)
		if err != nil {
			return nil, fmt.Errorf("requested address %q: %w", s, err)
		}
		out = append(out, a.Unmap())
	}
	return out, nil
}

func statusAddresses(svc *corev1.Service) []netip.Addr {
	var out []netip.Addr
	for _, ing := range svc.Status.LoadBalancer.Ingress {
		if a, err := netip.ParseAddr(ing.IP); err == nil {
			out = append(out, a)
		}
	}
	return out
}

// serve puts addrs on the interface and runs a forwarder per address and Service port,
// replacing those of an earlier state of the Service.
func (c *Controller) serve(key string, svc *corev1.Service, addrs []netip.Addr) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range addrs {
		if err := c.cfg.Interface.Add(a); err != nil {
			return err
		}
	}
	for _, old := range c.assigned[key] {
		if !slices.Contains(addrs, old) {
			c.removeAddressLocked(key, old)
		}
	}
	c.assigned[key] = addrs

	want := map[listenKey]corev1.ServicePort{}
	for _, a := range addrs {
		for _, p := range svc.Spec.Ports {
			if p.Protocol != corev1.ProtocolTCP && p.Protocol != corev1.ProtocolUDP {
				continue
			}
			want[listenKey{addr: netip.AddrPortFrom(a, uint16(p.Port)), protocol: p.Protocol, portName: p.Name}] = p
		}
	}
	current := c.serving[key]
	if current == nil {
		current = map[listenKey]Forwarder{}
		c.serving[key] = current
	}
	for k, f := range current {
		if _, ok := want[k]; !ok {
			f.Close()
			delete(current, k)
		}
	}
	var errs []error
	for k, p := range want {
		if _, ok := current[k]; ok {
			continue
		}
		backends := c.backends(svc.Namespace, svc.Name, p.Name, p.Protocol)
		log := c.cfg.Log.With("service", key, "address", k.addr, "protocol", k.protocol)
		var f Forwarder
		var err error
		if p.Protocol == corev1.ProtocolTCP {
			f, err = ListenTCP(k.addr, backends, log)
		} else {
			f, err = ListenUDP(k.addr, backends, log)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("listening on %s/%s: %w", k.addr, k.protocol, err))
			continue
		}
		log.Info("forwarding")
		current[k] = f
	}
	return errors.Join(errs...)
}

// backends returns the ready endpoints of one Service port from its EndpointSlices, each with
// the port the slice resolved the Service's targetPort to.
func (c *Controller) backends(ns, svcName, portName string, protocol corev1.Protocol) Backends {
	selector := labels.SelectorFromSet(labels.Set{discoveryv1.LabelServiceName: svcName})
	return func() []netip.AddrPort {
		slicesOfSvc, err := c.slices.EndpointSlices(ns).List(selector)
		if err != nil {
			return nil
		}
		var out []netip.AddrPort
		for _, s := range slicesOfSvc {
			if s.AddressType != discoveryv1.AddressTypeIPv4 && s.AddressType != discoveryv1.AddressTypeIPv6 {
				continue
			}
			port, ok := slicePort(s, portName, protocol)
			if !ok {
				continue
			}
			for _, ep := range s.Endpoints {
				if ep.Conditions.Ready != nil && !*ep.Conditions.Ready || len(ep.Addresses) == 0 {
					continue
				}
				if a, err := netip.ParseAddr(ep.Addresses[0]); err == nil {
					out = append(out, netip.AddrPortFrom(a, port))
				}
			}
		}
		return out
	}
}

func slicePort(s *discoveryv1.EndpointSlice, name string, protocol corev1.Protocol) (uint16, bool) {
	for _, p := range s.Ports {
		pName, pProto := "", corev1.ProtocolTCP
		if p.Name != nil {
			pName = *p.Name
		}
		if p.Protocol != nil {
			pProto = *p.Protocol
		}
		if pName == name && pProto == protocol && p.Port != nil && *p.Port > 0 && *p.Port < 65536 {
			return uint16(*p.Port), true
		}
	}
	return 0, false
}

// writeStatus sets status.loadBalancer.ingress to addrs, when it differs.
func (c *Controller) writeStatus(ctx context.Context, svc *corev1.Service, addrs []netip.Addr) error {
	var ingress []corev1.LoadBalancerIngress
	vip := corev1.LoadBalancerIPModeVIP
	for _, a := range addrs {
		ingress = append(ingress, corev1.LoadBalancerIngress{IP: a.String(), IPMode: &vip})
	}
	if ingressEqual(svc.Status.LoadBalancer.Ingress, ingress) {
		return nil
	}
	// A Service that is not ours any more keeps foreign addresses (another controller's).
	if addrs == nil && !c.ownsStatus(svc) {
		return nil
	}
	updated := svc.DeepCopy()
	updated.Status.LoadBalancer.Ingress = ingress
	_, err := c.client.CoreV1().Services(svc.Namespace).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: fieldManager})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err == nil {
		c.cfg.Log.Info("status updated", "service", svc.Namespace+"/"+svc.Name, "ingress", addrs)
	}
	return err
}

func (c *Controller) ownsStatus(svc *corev1.Service) bool {
	for _, a := range statusAddresses(svc) {
		if c.cfg.Pool.Contains(a) {
			return true
		}
	}
	return false
}

func ingressEqual(a, b []corev1.LoadBalancerIngress) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].IP != b[i].IP || a[i].Hostname != b[i].Hostname || (a[i].IPMode == nil) != (b[i].IPMode == nil) ||
			a[i].IPMode != nil && *a[i].IPMode != *b[i].IPMode {
			return false
		}
	}
	return true
}

// release stops key's forwarders and frees its addresses; it reports whether key held any.
func (c *Controller) release(key string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	held := len(c.assigned[key]) > 0
	for k, f := range c.serving[key] {
		f.Close()
		delete(c.serving[key], k)
	}
	delete(c.serving, key)
	for _, a := range c.assigned[key] {
		c.removeAddressLocked(key, a)
	}
	delete(c.assigned, key)
	c.cfg.Pool.Release(key)
	return held
}

// requeuePending queues the LoadBalancer Services still without an address: one of them may
// have been waiting for an address that was just freed.
func (c *Controller) requeuePending() {
	all, err := c.services.List(labels.Everything())
	if err != nil {
		return
	}
	for _, svc := range all {
		if c.serves(svc) && len(svc.Status.LoadBalancer.Ingress) == 0 {
			if key, err := cache.MetaNamespaceKeyFunc(svc); err == nil {
				c.queue.Add(key)
			}
		}
	}
}

func (c *Controller) removeAddressLocked(key string, a netip.Addr) {
	if err := c.cfg.Interface.Remove(a); err != nil {
		c.cfg.Log.Warn("removing address failed", "service", key, "address", a, "error", err)
	}
}

func (c *Controller) stopAll() {
	c.mu.Lock()
	keys := make([]string, 0, len(c.serving)+len(c.assigned))
	for k := range c.serving {
		keys = append(keys, k)
	}
	for k := range c.assigned {
		keys = append(keys, k)
	}
	c.mu.Unlock()
	for _, k := range keys {
		c.release(k)
	}
}

// removeStaleAddressesAfterSync waits until the initial Services have been handled and then
// removes pool addresses on the interface that no Service holds.
func (c *Controller) removeStaleAddressesAfterSync(ctx context.Context) {
	_ = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return c.queue.Len() == 0, nil
	})
	on, err := c.cfg.Interface.HostAddresses(c.cfg.Pool.Contains)
	if err != nil {
		c.cfg.Log.Warn("listing interface addresses failed", "error", err)
		return
	}
	for _, a := range on {
		if _, held := c.cfg.Pool.Owner(a); !held {
			c.mu.Lock()
			c.removeAddressLocked("", a)
			c.mu.Unlock()
			c.cfg.Log.Info("removed stale address", "address", a)
		}
	}
}
