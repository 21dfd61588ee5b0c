package devbroker

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// librdkafka (kcat's library) up to at least 2.0.2, the version Debian
// ships, compresses a gzip, snappy or lz4 batch only when the broker
// advertises Produce version 0 (its check for "the broker supports the
// codec"); otherwise it logs "Broker does not support compression type"
// and sends the batch uncompressed. kfake, like Kafka 4 (KIP-896),
// serves Produce from version 3, so kcat's gzip, snappy and lz4 batches
// arrived uncompressed: an interop test of the codecs passed without
// testing them. This broker answers librdkafka's ApiVersions query
// with kfake's own answer, Produce's lowest version lowered to 0.
// librdkafka still produces with the highest version both sides
// support (record batches, magic 2); a client that sent Produce below
// version 3 would get kfake's error, as before. Other clients (kafka-go,
// franz-go) get kfake's answer unchanged.
const librdkafka = "librdkafka"

// answerLibrdkafka installs the ApiVersions answer for librdkafka
// clients on c. It reads kfake's own answer once first, through a
// connection wire opens (TLS and SASL as the listener wants).
func answerLibrdkafka(c *kfake.Cluster, wire func(context.Context, string) (*wireConn, error)) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := wire(ctx, "devbroker")
	if err != nil {
		return err
	}
	defer w.Close()
	req := kmsg.NewPtrApiVersionsRequest()
	req.Version = 3
	req.ClientSoftwareName, req.ClientSoftwareVersion = "devbroker", "1"
	kresp, err := w.request(ctx, req)
	if err != nil {
		return err
	}
	own := kresp.(*kmsg.ApiVersionsResponse)
	if own.ErrorCode != 0 {
		return fmt.Errorf("devbroker: ApiVersions answered error code %d", own.ErrorCode)
	}
	c.ControlKey(int16(kmsg.ApiVersions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		req := kreq.(*kmsg.ApiVersionsRequest)
		// v3 and v4 carry the client's name; v5 adds checks kfake makes.
		if req.Version < 3 || req.Version > 4 || req.ClientSoftwareName != librdkafka {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ApiKeys = slices.Clone(own.ApiKeys)
		for i := range resp.ApiKeys {
			if resp.ApiKeys[i].ApiKey == int16(kmsg.Produce) {
				resp.ApiKeys[i].MinVersion = 0
			}
		}
		resp.SupportedFeatures = own.SupportedFeatures
		resp.FinalizedFeatures = own.FinalizedFeatures
		resp.FinalizedFeaturesEpoch = own.FinalizedFeaturesEpoch
		return resp, nil, true
	})
	return nil
}
