package drill

// This file holds what the drill needs of its broker target: checking it,
// and a dedicated stream for each scenario.

import (
	"context"
	"strings"
	"time"

	"github.com/idemkit/idem"
	"github.com/idemkit/idem/boxoffice"
	bjs "github.com/idemkit/idem/broker/jetstream"
)

// checkBroker makes sure the broker cfg names can be used.
func checkBroker(ctx context.Context, cfg Config) error {
	if cfg.Broker == "kafka" || cfg.Broker == "rabbitmq" {
		return idem.InvalidOptionf("drill: --broker %s is not built yet", cfg.Broker)
	}
	if cfg.NATSURL != "" {
		return checkNATS(ctx, cfg.NATSURL)
	}
	return nil
}

// scenarioBroker points the scenario o at the drill's broker: with --nats,
// a dedicated stream and subject on that server, deleted by the returned
// cleanup. With no broker given it leaves o alone (boxoffice.Open starts
// an embedded JetStream server) and returns a nil cleanup.
func (r *runner) scenarioBroker(_ context.Context, o *boxoffice.Options) (func(), error) {
	if r.cfg.NATSURL == "" {
		return nil, nil
	}
	id := randHex(4)
	o.NATSURL = r.cfg.NATSURL
	o.Stream = "IDEM_DRILL_" + strings.ToUpper(id)
	o.Config.Subject = "idem-drill." + id + "." + boxoffice.Subject
	stream := o.Stream
	return func() { r.deleteStream(stream) }, nil
}

func (r *runner) deleteStream(stream string) {
	nc, js, err := bjs.Dial(r.cfg.NATSURL)
	if err != nil {
		return
	}
	defer nc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = js.DeleteStream(ctx, stream)
}
