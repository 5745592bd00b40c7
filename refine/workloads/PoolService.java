// PoolService: a small JVM service with named thread pools: threadwise's bundled JVM workload
// (refine/workloads/poolservice.toml) and the service of its bpf tests.
//
// Threads (their comms, as the kernel sees them):
//   acceptor     hands requests to the pool, one per completion it is told about
//   request-N    the request pool: CPU-busy workers; each finished request goes to the
//                writer's queue and a completion back to the acceptor (both wake a sleeper)
//   writer       drains the writer queue (the pool's results), little CPU of its own
//   flusher      wakes every 100 ms and "flushes" what the writer counted
// plus the JVM's own threads (GC, C1/C2 compilers, VM Thread, ...), which sit idle.
//
// Usage: java PoolService [seconds] [workers] [work_us] [jsonl]; prints "ready" once the pool
// runs, then one line per second with the requests done. Exits after `seconds`.
// With "jsonl" (threadwise's jsonl metrics contract) it says "PoolService: ready" on stderr and
// prints one JSON object every 500 ms on stdout:
//   {"requests_per_s": ..., "acceptor_lat_p50_us": ..., "acceptor_lat_p99_us": ...}
// where acceptor_lat is the time from a worker's completion to the acceptor taking it: the wake
// latency of the acceptor, the service's latency-sensitive thread.
import java.util.concurrent.ArrayBlockingQueue;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.ThreadFactory;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

public final class PoolService {
    static final AtomicLong written = new AtomicLong();
    static volatile boolean stop;
    static volatile long sink;
    // acceptor wake latencies (ns) since the last report; the reporter swaps the list
    static java.util.ArrayList<Long> latencies = new java.util.ArrayList<>();
    static final Object latencyLock = new Object();

    static long work(long seed, long workNs) {
        long end = System.nanoTime() + workNs, x = seed;
        while (System.nanoTime() < end) {
            for (int i = 0; i < 200; i++) {
                x ^= x << 13; x ^= x >>> 7; x ^= x << 17;
            }
        }
        return x;
    }

    static Thread named(String name, Runnable body) {
        Thread t = new Thread(body, name);
        t.setDaemon(true);
        return t;
    }

    public static void main(String[] args) throws Exception {
        long seconds = args.length > 0 ? Long.parseLong(args[0]) : 30;
        int workers = args.length > 1 ? Integer.parseInt(args[1]) : 3;
        long workNs = (args.length > 2 ? Long.parseLong(args[2]) : 300) * 1000;
        BlockingQueue<Long> requests = new ArrayBlockingQueue<>(4 * workers);
        BlockingQueue<Long> results = new ArrayBlockingQueue<>(1024);
        BlockingQueue<Long> completions = new ArrayBlockingQueue<>(1024);

        AtomicInteger n = new AtomicInteger();
        ThreadFactory pool = r -> named("request-" + n.getAndIncrement(), r);
        ExecutorService requestPool = Executors.newFixedThreadPool(workers, pool);
        for (int i = 0; i < workers; i++) {
            requestPool.execute(() -> {
                try {
                    while (!stop) {
                        long req = requests.take();
                        long out = work(req, workNs);
                        results.put(out);
                        completions.put(System.nanoTime());
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
        }
        Thread acceptor = named("acceptor", () -> {
            long next = 1;
            try {
                for (int i = 0; i < 4 * workers; i++) requests.put(next++);
                while (!stop) {
                    long done = completions.take();
                    long waited = System.nanoTime() - done;
                    synchronized (latencyLock) {
                        latencies.add(waited);
                    }
                    requests.put(next++);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Thread writer = named("writer", () -> {
            try {
                while (!stop) {
                    sink += results.take();
                    written.incrementAndGet();
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        Thread flusher = named("flusher", () -> {
            long flushed = 0;
            try {
                while (!stop) {
                    Thread.sleep(100);
                    flushed = written.get();
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            sink += flushed;
        });
        acceptor.start();
        writer.start();
        flusher.start();
        boolean jsonl = args.length > 3 && args[3].equals("jsonl");
        if (jsonl) {
            System.err.println("PoolService: ready");
            System.err.flush();
            report(seconds);
        } else {
            System.out.println("ready");
            System.out.flush();
            perSecond(seconds);
        }
        stop = true;
        requestPool.shutdownNow();
        System.exit(0);
    }

    static void perSecond(long seconds) throws InterruptedException {
        long last = 0;
        for (long s = 0; s < seconds; s++) {
            Thread.sleep(1000);
            long now = written.get();
            System.out.println("requests/s " + (now - last));
            System.out.flush();
            last = now;
        }
    }

    static void report(long seconds) throws InterruptedException {
        long last = written.get(), lastNs = System.nanoTime();
        long end = lastNs + seconds * 1_000_000_000L;
        while (System.nanoTime() < end) {
            Thread.sleep(500);
            long now = written.get(), nowNs = System.nanoTime();
            java.util.ArrayList<Long> batch;
            synchronized (latencyLock) {
                batch = latencies;
                latencies = new java.util.ArrayList<>();
            }
            java.util.Collections.sort(batch);
            double rate = (now - last) * 1e9 / (nowNs - lastNs);
            StringBuilder line = new StringBuilder("{\"requests_per_s\": ").append(Math.round(rate));
            if (!batch.isEmpty()) {
                line.append(", \"acceptor_lat_p50_us\": ").append(pct(batch, 0.50) / 1000.0)
                    .append(", \"acceptor_lat_p99_us\": ").append(pct(batch, 0.99) / 1000.0);
            }
            System.out.println(line.append("}"));
            System.out.flush();
            last = now;
            lastNs = nowNs;
        }
    }

    static long pct(java.util.List<Long> sorted, double q) {
        int at = (int) Math.min(sorted.size() - 1, Math.max(0, Math.ceil(q * sorted.size()) - 1));
        return sorted.get(at);
    }
}
