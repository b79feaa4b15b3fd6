// A one-thread kernel that waits on the GPU for a given time (built-in runtime kernel). Used to
// hold a stream while the host enqueues a batch of work behind it, so that timing that batch
// between two events measures the GPU's time, not the host's enqueue rate (the cuBLASLt tuning
// pass times kernels of a few microseconds this way).
extern "C" __global__ void delay_ns(unsigned long long ns) {
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        __nanosleep(1000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
}
